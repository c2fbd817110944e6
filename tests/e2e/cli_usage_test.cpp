// Usage errors of the `nanovllm` binary: every one exits 1 with "error: <message>" naming the flag and the
// bad value (no source file:line unless --debug or NANOVLLM_LOG_LEVEL=debug), a "did you mean" for
// mistyped options and subcommands, and range checks of option values before any model is loaded.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "support/test_models.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

using testing::run_nanovllm;

std::string tiny_model() { return testing::tiny_model_dir("cli-usage", nlohmann::json::object(), 3).string(); }

// A source location as nanovllm::Error carries it: "src/nanovllm/x/y.cpp:123" or "tools/cli/z.cpp:45".
bool has_source_location(const std::string& s) {
  return std::regex_search(s, std::regex(R"((src|tools)/[A-Za-z0-9_/]+\.(cpp|h):[0-9]+)"));
}

// Runs `args`; expects exit status 1 and every part in stderr, which starts with "error: ".
void expect_usage_error(const std::string& args, std::initializer_list<std::string> parts) {
  SCOPED_TRACE(args);
  const auto r = run_nanovllm(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  for (const std::string& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << "'" << p << "' not in: " << r.err;
  EXPECT_FALSE(has_source_location(r.err)) << r.err;
}

TEST(CliUsage, ParseErrorsExitOne) {
  // CLI11's own exit codes were 104-109; the README promises 1.
  const std::string m = tiny_model();
  expect_usage_error("generate --model " + m + " --max-tokens abc --prompt-ids 1", {"--max-tokens", "integer", "abc"});
  expect_usage_error("generate --prompt-ids 1", {"--model is required"});
  expect_usage_error("generate --model", {"--model needs a value"});
  expect_usage_error("generate --model " + m + " --prompt-ids 1 --ignore-eos=maybe", {"--ignore-eos", "maybe"});
  expect_usage_error("", {"command is required", "generate", "serve"});
  expect_usage_error("bench", {"command is required", "throughput"});
}

TEST(CliUsage, TyposGetADidYouMean) {
  const std::string m = tiny_model();
  expect_usage_error("generate --model " + m + " --prompt-ids 1 --max-tokns 5",
                     {"unknown option --max-tokns", "did you mean --max-tokens?"});
  expect_usage_error("generate --model " + m + " --prompt-ids 1 --max_tokens 5", {"did you mean --max-tokens?"});
  expect_usage_error("generate --model " + m + " --prompt-ids 1 --temp 0", {"did you mean --temperature?"});
  expect_usage_error("serve --model " + m + " --shutdown-grce 1", {"did you mean --shutdown-grace?"});
  expect_usage_error("genrate --model " + m, {"unknown command 'genrate'", "did you mean generate?"});
  expect_usage_error("bench thruput --model " + m, {"unknown command 'thruput'", "did you mean throughput?"});
  // Nothing close: no suggestion, but the option is named.
  const auto r = run_nanovllm("generate --model " + m + " --prompt-ids 1 --zzzzzzzz");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--zzzzzzzz"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
}

TEST(CliUsage, OptionValuesAreRangeChecked) {
  // Each names the flag and the value as typed (not SamplingParams' internal field names).
  const std::string g = "generate --model " + tiny_model() + " --prompt-ids 1 ";
  expect_usage_error(g + "--max-tokens -5", {"--max-tokens must be >= 1, got -5"});
  expect_usage_error(g + "--max-tokens 0", {"--max-tokens must be >= 1, got 0"});
  expect_usage_error(g + "--min-tokens -1", {"--min-tokens must be >= 0, got -1"});
  expect_usage_error(g + "--min-tokens 9 --max-tokens 3", {"--min-tokens (9) must be <= --max-tokens (3)"});
  expect_usage_error(g + "--temperature -0.5", {"--temperature", "-0.5"});
  expect_usage_error(g + "--top-p 0", {"--top-p must be in (0, 1], got 0"});
  expect_usage_error(g + "--top-p nan", {"--top-p", "finite", "nan"});
  expect_usage_error(g + "--top-k -2", {"--top-k", "-2"});
  expect_usage_error(g + "--min-p 1.5", {"--min-p", "1.5"});
  expect_usage_error(g + "--repetition-penalty 0", {"--repetition-penalty", "> 0"});
  expect_usage_error(g + "--presence-penalty 3", {"--presence-penalty", "[-2, 2]"});
  expect_usage_error(g + "--logprobs 21", {"--logprobs", "21"});
  expect_usage_error(g + "--stop-token-ids 1,-3", {"--stop-token-ids", "-3"});
  expect_usage_error(g + "--stop-token-ids 999999", {"--stop-token-ids", "999999", "vocabulary"});
  expect_usage_error(g + "--block-size 0", {"--block-size", "0"});
  expect_usage_error(g + "--sparse-page-size 0", {"--sparse-page-size", "0"});
  expect_usage_error(g + "--sparse-page-size 32 --block-size 16",
                     {"--block-size 16 and --sparse-page-size 32 disagree: they set the same option (block_size)"});
  expect_usage_error(g + "--sparse-prefill-policy xattn",
                     {"--sparse-prefill-policy: sparse_prefill_policy: unknown value 'xattn'",
                      "dense | xattention | minference | flexprefill | avgpool"});
  expect_usage_error(g + "--sparse-prefill-threshold 1.5", {"--sparse-prefill-threshold", "1.5"});
  expect_usage_error(g + "--sparse-prefill-min-tokens 0", {"--sparse-prefill-min-tokens", "0"});
  expect_usage_error(g + "--sparse-prefill-policy xattention --sparse-prefill-stride 3",
                     {"sparse_prefill_stride 3 must divide sparse_prefill_block_size 128"});
  expect_usage_error(g + "--max-num-seqs 0", {"--max-num-seqs must be >= 1, got 0"});
  expect_usage_error(g + "--gpu-memory-utilization 1.5", {"--gpu-memory-utilization", "1.5"});
  expect_usage_error(g + "--num-kv-buffers 9", {"--num-kv-buffers", "9"});
  expect_usage_error(g + "--kv-cache-gib 0", {"--kv-cache-gib must be > 0, got 0"});
  expect_usage_error(g + "--tensor-parallel-size 0", {"--tensor-parallel-size", "0"});
  expect_usage_error(g + "--tensor-parallel-size 3", {"tensor_parallel_size 3 does not divide num_attention_heads 4"});
  expect_usage_error(g + "--max-model-len 100000000", {"max_model_len 100000000 exceeds the model's limit"});
  const std::string s = "serve --model " + tiny_model() + " ";
  expect_usage_error(s + "--shutdown-grace -1", {"--shutdown-grace", "-1"});
  expect_usage_error(s + "--max-n 0", {"--max-n", "got 0"});
  expect_usage_error(s + "--port 70000", {"--port", "70000"});
  expect_usage_error(s + "--max-concurrent-requests 0", {"--max-concurrent-requests", "0"});
  // 100000 used to abort the server (SIGABRT) after it printed its address.
  expect_usage_error(s + "--max-concurrent-requests 100000", {"--max-concurrent-requests must be in [1, 4096], got 100000"});
  expect_usage_error(s + "--max-body-mib 0", {"--max-body-mib", "0"});
  expect_usage_error("bench throughput --model x --num-seqs 0", {"--num-seqs", "0"});
  expect_usage_error("bench throughput --model x --min-input 9 --max-input 3", {"--min-input (9)", "--max-input (3)"});
  expect_usage_error("bench serve --model x --num-clients 0", {"--num-clients", "0"});
  expect_usage_error("bench tokenizer --model x --passes 0", {"--passes", "0"});
  expect_usage_error("bench latency --model x --prefill 128,0", {"--prefill", "0"});
  expect_usage_error("bench latency --model x --batch 0", {"--batch", "0"});
}

TEST(CliUsage, LocationsOnlyInDebugMode) {
  const std::string args = "generate --backend cpu --model /nonexistent-model --prompt-ids 1";
  auto r = run_nanovllm(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: model directory /nonexistent-model does not exist\n");
  r = run_nanovllm(args + " --debug");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has_source_location(r.err)) << r.err;
  EXPECT_NE(r.err.find("/nonexistent-model does not exist"), std::string::npos) << r.err;
  r = run_nanovllm("--debug " + args);  // before the subcommand too
  EXPECT_TRUE(has_source_location(r.err)) << r.err;
  const auto env = testing::run_nanovllm_env("NANOVLLM_LOG_LEVEL=debug", args);
  EXPECT_EQ(env.exit_code, 1);
  EXPECT_TRUE(has_source_location(env.err)) << env.err;
}

TEST(CliUsage, HelpAndVersionExitZero) {
  auto r = run_nanovllm("generate --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--logit-bias"), std::string::npos);
  EXPECT_NE(r.out.find("--debug"), std::string::npos);
  r = run_nanovllm("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("nanovllm"), std::string::npos);
}

}  // namespace
}  // namespace nanovllm
