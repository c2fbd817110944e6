// `nanovllm eval`: bad input fails with a clear error (unknown task, context over max_model_len, a model
// without a tokenizer), --dump-prompts needs only a tokenizer, and the whole path runs on a random model
// with the offload path giving the dense path's tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "eval_test_util.h"
#include "support/process_scratch_dir.h"

namespace nanovllm::eval {
namespace {

using testing::retrieval_model_dir;
using testing::run_cli;

const std::filesystem::path& scratch() {
  static const nanovllm::testing::ProcessScratchDir dir("nanovllm-eval-cli");
  return dir.path();
}

// A random Qwen3 checkpoint of the fixture's shape with its byte tokenizer (written once per process).
std::string random_byte_model() {
  const auto dir = scratch() / "random-byte-model";
  if (!std::filesystem::exists(dir / "config.json")) {
    const auto r = run_cli("make-test-model --out " + dir.string() + " --tokenizer " + retrieval_model_dir().string() +
                           " --config-override '{\"vocab_size\": 384, \"hidden_size\": 128, \"intermediate_size\": 256, "
                           "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                           "\"head_dim\": 32, \"max_position_embeddings\": 8192}'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  return dir.string();
}

void expect_clear_error(const std::string& args, const std::string& part) {
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(part), std::string::npos) << "'" << part << "' not in: " << r.output;
}

TEST(EvalCli, BadInputGetsClearErrors) {
  const std::string model = random_byte_model();
  expect_clear_error("eval ruler --backend cpu --model " + model + " --tasks niah_single_1,bogus", "unknown task 'bogus'");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --tasks qa_2", "HotpotQA");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --context 16384", "longer than max_model_len 8192");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --context 4096 --max-model-len 2048",
                     "--context 4096 is longer than max_model_len 2048");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --tasks vt --context 512", "context 512 is too short");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --samples 0", "--samples must be >= 1");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --template chat", "no chat template");
  expect_clear_error("eval needle --backend cpu --model " + model + " --task niah_multikey_1", "single-needle task");
  expect_clear_error("eval needle --backend cpu --model " + model + " --depths 50,120", "[0, 100]");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --first-token-logprobs 21",
                     "--first-token-logprobs must be in [1, 20], got 21");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --kl-reference x.json",
                     "--kl-reference needs --first-token-logprobs K");
  expect_clear_error("eval ruler --backend cpu --model " + model + " --first-token-logprobs 5 --kl-reference " +
                         model + "/config.json",
                     "not an eval --json-out file");

  // A model directory without tokenizer.json: the text tasks cannot be built.
  const auto bare = scratch() / "no-tokenizer";
  std::filesystem::create_directories(bare);
  std::filesystem::copy_file(std::filesystem::path(model) / "config.json", bare / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  expect_clear_error("eval ruler --backend cpu --model " + bare.string(), "no tokenizer.json");
  expect_clear_error("eval ruler --backend cpu --model /nonexistent/model", "/nonexistent/model");
}

TEST(EvalCli, DumpPromptsNeedsOnlyATokenizer) {
  const auto out = scratch() / "dump.jsonl";
  const auto r = run_cli("eval ruler --model " + retrieval_model_dir().string() +
                         " --tasks niah_single_1,vt --context 2048,4096 --samples 2 --seed 7 --dump-prompts " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(out);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["seed"], 7);
    EXPECT_LE(j["prompt_tokens"].get<int64_t>() + j["max_new_tokens"].get<int64_t>(), j["context"].get<int64_t>());
    EXPECT_EQ(j["prompt_ids"].size(), j["prompt"].get<std::string>().size());  // one token per byte
    ++n;
  }
  EXPECT_EQ(n, 2 * 2 * 2);
  // To stdout for a pipe (the trainer streams it).
  const auto s = run_cli("eval needle --model " + retrieval_model_dir().string() +
                         " --context 1024 --depths 0,100 --samples 1 --dump-prompts -");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  std::istringstream lines(s.output);
  int objects = 0;
  while (std::getline(lines, line)) objects += line.starts_with("{\"task\":\"niah_single_2\"") ? 1 : 0;
  EXPECT_EQ(objects, 2) << s.output.substr(0, 300);

  // vt and cwe do not fit 1K byte tokens: an error, or left out with --skip-too-short.
  const std::string all_1k = "eval ruler --model " + retrieval_model_dir().string() +
                             " --tasks niah_single_2,vt,cwe --context 1024 --samples 2 --dump-prompts " +
                             (scratch() / "skip.jsonl").string();
  expect_clear_error(all_1k, "context 1024 is too short");
  const auto k = run_cli(all_1k + " --skip-too-short");
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("skipped 2 samples of vt at 1024"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("wrote 2 prompts"), std::string::npos) << k.output;
}

nlohmann::json run_json(const std::string& args, const std::string& name) {
  const auto out = scratch() / (name + ".json");
  const auto r = run_cli(args + " --json-out " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mean"), std::string::npos) << r.output;
  std::ifstream f(out);
  return nlohmann::json::parse(f);
}

TEST(EvalCli, RandomModelRunsAndOffloadGivesTheDenseTokens) {
  const std::string args = "eval ruler --backend cpu --model " + random_byte_model() +
                           " --tasks niah_single_2,niah_multikey_2,fwe --context 1024 --samples 2 --max-new-tokens 8";
  const auto dense = run_json(args, "dense");
  const auto offload = run_json(args + " --enable-cpu-offload --offload-min-tokens 1 --offload-block-size 64", "offload");
  EXPECT_EQ(dense["cpu_offload"], false);
  EXPECT_EQ(offload["cpu_offload"], true);
  ASSERT_EQ(dense["samples"].size(), 6u);
  ASSERT_EQ(offload["samples"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(dense["samples"][i]["output_ids"], offload["samples"][i]["output_ids"]) << i;
    EXPECT_EQ(dense["samples"][i]["output_ids"].size(), 8u);
  }
  EXPECT_TRUE(dense["scores"].contains("fwe"));
  EXPECT_TRUE(dense["mean"].contains("1024"));

  const auto sweep = run_json("eval needle --backend cpu --model " + random_byte_model() +
                                  " --context 1024 --depths 0,50,100 --samples 1 --max-new-tokens 4",
                              "needle");
  EXPECT_EQ(sweep["rows"], nlohmann::json({"0%", "50%", "100%"}));
  EXPECT_EQ(sweep["samples"].size(), 3u);
}

// A decode policy only runs in steps without a prefill chunk: with several prompts in flight the score mixes in
// dense decode steps, and eval says so (a Quest record taken that way once read 99.9% of dense where the policy
// alone keeps 81%: bench/README.md, issue 46).
TEST(EvalCli, SparseDecodeSaysWhenPrefillStepsHideIt) {
  const std::string args = "eval ruler --backend cpu --model " + random_byte_model() +
                           " --tasks niah_single_2 --context 1024 --samples 1 --max-new-tokens 2"
                           " --sparse-policy quest --sparse-budget 64";
  const std::string note = "sparse decode runs only in steps without a prefill chunk";
  const auto mixed = run_cli(args);
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  EXPECT_NE(mixed.output.find(note), std::string::npos) << mixed.output;
  const auto alone = run_cli(args + " --max-num-seqs 1");
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_EQ(alone.output.find(note), std::string::npos) << alone.output;
}

}  // namespace
}  // namespace nanovllm::eval
