// Structured outputs on the GPU, end to end: a tiny random model with Qwen3's tokenizer generates under a
// JSON schema, a regex and a choice list through CUDA graphs, eagerly, and with async scheduling on. Every
// answer that stops is valid (the token masks reach the GPU sampler), and the three paths give the same
// tokens (same device math; a constrained step is never launched ahead, so async cannot change them).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "nanovllm/llm/llm.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

bool gpu_present() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

EngineConfig structured_config() {
  EngineConfig ec;
  // head_dim 64: the CUDA attention kernels are built for 64, 128 and 256.
  const nlohmann::json override = {
      {"vocab_size", 151936}, {"tie_word_embeddings", false}, {"eos_token_id", 151645}, {"head_dim", 64}};
  ec.model.path = testing::tiny_model_dir("cuda-structured", override, 21, /*qwen3_tokenizer=*/true);
  ec.model.backend = Backend::kCuda;
  ec.cache.block_size = 16;
  ec.cache.num_kv_blocks = 256;
  ec.scheduler.max_num_batched_tokens = 512;
  return ec;
}

TEST(CudaStructuredOutputs, ValidAnswersAndTheSameTokensThroughGraphsEagerAndAsync) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const std::string schema = R"({"type":"object","properties":{"k":{"type":"string","maxLength":5},
      "n":{"type":"integer","minimum":-3,"maximum":300},"b":{"type":"boolean"}},"required":["k","n","b"]})";
  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back("Request " + std::to_string(i));
    SamplingParams sp;
    sp.temperature = i % 3 == 0 ? 0.0f : 1.0f;
    sp.seed = 100 + i;
    sp.max_tokens = 120;
    sp.structured_outputs = StructuredOutputsParams{};
    if (i % 3 == 0) sp.structured_outputs->json = schema;
    if (i % 3 == 1) sp.structured_outputs->regex = "[a-f]{4}-[0-9]{1,3}";
    if (i % 3 == 2) sp.structured_outputs->choice = std::vector<std::string>{"north", "south", "east west"};
    params.push_back(sp);
  }
  // Free requests alongside: they keep their unmasked rows.
  for (int i = 0; i < 3; ++i) {
    prompts.push_back("free " + std::to_string(i));
    SamplingParams sp;
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = 30;
    params.push_back(sp);
  }
  auto run = [&](bool eager, bool async) {
    EngineConfig ec = structured_config();
    ec.model.enforce_eager = eager;
    ec.scheduler.async_scheduling = async;
    LLM llm(ec);
    return llm.generate(prompts, params);
  };
  const auto graphs = run(false, false), eager = run(true, false), async = run(false, true);
  int finished = 0;
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(graphs[i].token_ids, eager[i].token_ids) << i;
    EXPECT_EQ(graphs[i].token_ids, async[i].token_ids) << i;
    if (graphs[i].finish_reason != FinishReason::kStop) continue;
    ++finished;
    const std::string& t = graphs[i].text;
    if (i % 3 == 0) {
      nlohmann::json v;
      ASSERT_NO_THROW(v = nlohmann::json::parse(t)) << t;
      EXPECT_TRUE(v["k"].is_string() && v["n"].is_number_integer() && v["b"].is_boolean()) << t;
      EXPECT_GE(v["n"].get<int>(), -3) << t;
      EXPECT_LE(v["n"].get<int>(), 300) << t;
    } else if (i % 3 == 1) {
      EXPECT_TRUE(std::regex_match(t, std::regex("[a-f]{4}-[0-9]{1,3}"))) << t;
    } else {
      EXPECT_TRUE(t == "north" || t == "south" || t == "east west") << t;
    }
  }
  EXPECT_GE(finished, 8);
  for (size_t i = 12; i < prompts.size(); ++i) EXPECT_EQ(graphs[i].token_ids.size(), 30u);
}

}  // namespace
}  // namespace nanovllm
