// The `nanovllm` binary: exit codes and JSON output of generate, make-test-model, bad arguments.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::run_cli;

std::string tiny_model() { return testing::tiny_model_dir("cli", nlohmann::json::object(), 3).string(); }

TEST(Cli, GenerateJsonGivesOneObjectPerPrompt) {
  const auto r = run_cli("generate --backend cpu --model " + tiny_model() +
                         " --prompt-ids 1,2,3 --prompt-ids '7, 8' --temperature 0 --max-tokens 5 --ignore-eos"
                         " --logprobs 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  int objects = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["token_ids"].size(), 5u);
    EXPECT_EQ(j["finish_reason"], "length");
    ASSERT_EQ(j["logprobs"].size(), 5u);
    for (const auto& step : j["logprobs"]) {
      ASSERT_EQ(step.size(), 3u);
      EXPECT_GE(step[0]["logprob"].get<double>(), step[1]["logprob"].get<double>());
      EXPECT_LE(step[0]["logprob"].get<double>(), 0.0);
    }
    // Greedy: the generated token is the top-1 entry of its step.
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(j["token_ids"][i], j["logprobs"][i][0]["id"]);
    ++objects;
  }
  EXPECT_EQ(objects, 2) << r.output;
}

TEST(Cli, BadArgumentsFailCleanly) {
  const std::string model = tiny_model();
  for (const std::string& bad : {std::string("1,x,3"), std::string(""), std::string("1,,2"), std::string("-4"),
                                 std::string("99999999999"), std::string("1,2,")}) {
    const auto r = run_cli("generate --backend cpu --model " + model + " --prompt-ids '" + bad + "'");
    EXPECT_NE(r.exit_code, 0) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("rror"), std::string::npos) << bad << ": " << r.output;
  }
  auto r = run_cli("generate --backend cpu --model /nonexistent --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent"), std::string::npos) << r.output;
  r = run_cli("generate --backend cpu --model " + model + " --prompt-ids 1,2 --top-p 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_cli("generate --backend tpu --model " + model + " --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_cli("generate --backend cpu --model " + model + " --prompt-ids 1 --max-model-len 100000000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_cli("make-test-model --out /tmp/nanovllm-bad-preset --preset nope");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_cli("make-test-model --out /tmp/nanovllm-bad-override --config-override '{not json'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// make-test-model writes a sharded Qwen3MoeForCausalLM that generate loads and runs.
TEST(Cli, MakesAndRunsAShardedMoeModel) {
  const std::string dir = (std::filesystem::temp_directory_path() / "nanovllm-cli-moe").string();
  std::filesystem::remove_all(dir);
  auto r = run_cli("make-test-model --out " + dir + " --preset qwen3-moe-tiny --seed 4 --shard-max-bytes 200000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors.index.json"));
  r = run_cli("generate --backend cpu --model " + dir + " --prompt-ids 5,6,7 --temperature 0 --max-tokens 4 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto line = r.output.substr(r.output.find('{'));
  EXPECT_EQ(nlohmann::json::parse(line.substr(0, line.find('\n')))["token_ids"].size(), 4u);
  std::filesystem::remove_all(dir);
}

// make-test-model --fp8 writes a sharded block-scaled FP8 checkpoint; generate runs it, and runs the bf16
// checkpoint of the same seed under --quantization fp8 to the same tokens; a bad --quantization is named.
TEST(Cli, MakesAndRunsAnFp8ModelAndQuantizesAtLoad) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "nanovllm-cli-fp8";
  std::filesystem::remove_all(dir);
  auto r = run_cli("make-test-model --out " + (dir / "fp8").string() + " --fp8 --seed 4 --shard-max-bytes 60000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto config = nlohmann::json::parse(std::ifstream(dir / "fp8" / "config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "fp8");
  EXPECT_TRUE(std::filesystem::exists(dir / "fp8" / "model.safetensors.index.json"));
  r = run_cli("make-test-model --out " + (dir / "bf16").string() + " --seed 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto tokens = [&](const std::string& model, const std::string& flags) {
    const auto out = run_cli("generate --backend cpu --model " + model + " " + flags +
                             " --prompt-ids 5,6,7 --temperature 0 --max-tokens 6 --ignore-eos --json");
    EXPECT_EQ(out.exit_code, 0) << out.output;
    const auto line = out.output.substr(out.output.find('{'));
    return nlohmann::json::parse(line.substr(0, line.find('\n')))["token_ids"];
  };
  const auto fp8 = tokens((dir / "fp8").string(), "");
  EXPECT_EQ(fp8.size(), 6u);
  EXPECT_EQ(tokens((dir / "bf16").string(), "--quantization fp8"), fp8);
  r = run_cli("generate --backend cpu --model " + (dir / "bf16").string() + " --quantization int4 --prompt-ids 5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("quantization"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("int4"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nanovllm
