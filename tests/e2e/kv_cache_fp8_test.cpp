// --kv-cache-dtype on the CPU engine (docs/kv_cache.md): the fp8 cache against the model's dtype (f32 here) on the
// peaked tiny model, its memory accounting, tensor parallel, and the option's errors. The combinations with offload,
// Quest and the sparse prefill policies are the quality matrix's fp8 rows (tests/eval/quality_matrix_test.cpp) and
// the offload tests' fp8 instances (offload_test.cpp); on CUDA, tests/cuda/e2e_cuda_kv_fp8_sparse_prefill_test.cpp.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/sparse/sparse_config.h"
#include "support/expect_error.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

// The peaked tied model of the CUDA-vs-CPU tests (the `tiny` preset, head_dim 64, one KV head).
EngineConfig peaked_config(const char* kv_dtype) {
  EngineConfig ec;
  ec.model.path = testing::tiny_model_dir("cuda-vs-cpu", {{"head_dim", 64}, {"num_key_value_heads", 1}}, 21);
  ec.model.backend = Backend::kCpu;
  ec.cache.block_size = 16;
  ec.cache.kv_cache_dtype = kv_dtype;
  ec.scheduler.max_num_batched_tokens = 256;
  return ec;
}

std::vector<std::vector<int32_t>> generate(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts,
                                           int64_t steps) {
  LLM llm(ec);
  std::vector<std::vector<int32_t>> out;
  for (const RequestOutput& o : llm.generate(prompts, testing::greedy(steps))) out.push_back(o.token_ids);
  return out;
}

// Greedy tokens of 64 steps: the fp8 cache against f32 and bf16 ones, position by position. Issue 47's bar is 97%;
// measured 100% on these prompts (the model is peaked: fp8's ~3% per-element K/V error rarely flips its top token).
TEST(KvCacheFp8Engine, GreedyTokensAgreeWithTheUnquantizedCacheOnThePeakedModel) {
  const auto prompts = random_prompts({1, 15, 16, 17, 100, 129, 200}, 512, 47);
  const auto f32 = generate(peaked_config("auto"), prompts, 64);
  const auto bf16 = generate(peaked_config("bf16"), prompts, 64);
  const auto fp8 = generate(peaked_config("fp8"), prompts, 64);
  const auto agreement = [&](const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b) {
    int64_t same = 0, total = 0;
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t j = 0; j < a[i].size(); ++j, ++total) same += a[i][j] == b[i][j] ? 1 : 0;
    return static_cast<double>(same) / static_cast<double>(total);
  };
  EXPECT_GE(agreement(fp8, f32), 0.97);
  EXPECT_GE(agreement(fp8, bf16), 0.97);
  EXPECT_GE(agreement(bf16, f32), 0.97);
  std::cout << "greedy agreement over 64 steps: fp8 vs f32 " << agreement(fp8, f32) << ", fp8 vs bf16 "
            << agreement(fp8, bf16) << ", bf16 vs f32 " << agreement(bf16, f32) << "\n";
}

// The same KV budget holds (4 D) / (D + 4) times the blocks of f32 (a code per element and a 4-byte scale per row)
// and 2 D / (D + 4) times those of bf16.
TEST(KvCacheFp8Engine, TheSameBudgetHoldsMoreBlocks) {
  const auto blocks = [](const char* dtype) {
    EngineConfig ec = peaked_config(dtype);
    ec.cache.kv_cache_bytes = 64 << 20;
    ec.scheduler.max_num_seqs = 1024;  // the budget, not the sequences' reach, bounds the cache
    ec.model.max_model_len = 4096;
    LLM llm(ec);
    return llm.engine().config().cache.num_kv_blocks;
  };
  const int64_t f32 = blocks("auto"), bf16 = blocks("bf16"), fp8 = blocks("fp8");
  const int64_t D = 64;
  EXPECT_NEAR(static_cast<double>(fp8) / static_cast<double>(f32), 4.0 * D / (D + 4), 0.01);
  EXPECT_NEAR(static_cast<double>(fp8) / static_cast<double>(bf16), 2.0 * D / (D + 4), 0.01);
}

// Tensor parallel (ranks as threads, the query heads split; the one KV head replicated): the fp8 cache gives the
// unsplit fp8 tokens, alone and with offload on every rank.
TEST(KvCacheFp8Engine, TensorParallelGivesTheUnsplitTokens) {
  EngineConfig one = peaked_config("fp8");
  const auto prompts = random_prompts({9, 40, 77}, 512, 5);
  const auto want = generate(one, prompts, 24);
  EngineConfig two = one;
  two.parallel.tensor_parallel_size = 2;
  EXPECT_EQ(generate(two, prompts, 24), want);
  two.offload.enabled = true;
  two.offload.min_tokens = 1;
  two.offload.block_size = 16;
  EXPECT_EQ(generate(two, prompts, 24), want);
}

TEST(KvCacheFp8Engine, BadValuesAndUnsupportedCombinationsAreRefused) {
  using testing::expect_error;
  EngineConfig ec = peaked_config("fp9");
  expect_error([&] { LLM llm(ec); }, {"kv_cache_dtype", "fp9", "auto | bf16 | fp8 | fp8_e4m3"});
  ec = peaked_config("fp8_e4m3");  // vLLM's other spelling
  EXPECT_EQ(generate(ec, {{1, 2, 3}}, 4), generate(peaked_config("fp8"), {{1, 2, 3}}, 4));
  EngineConfig dca;
  dca.model.path = testing::preset_model_dir("dca-tiny", "seed32", nlohmann::json::object(), 32);
  dca.model.backend = Backend::kCpu;
  dca.cache.kv_cache_dtype = "fp8";
  expect_error([&] { LLM llm(dca); }, {"--kv-cache-dtype fp8", "Dual Chunk Attention"});
}

// The cuda backend takes fp8 with every sparse prefill policy (its estimators and the block-sparse kernel dequantize
// the cache as they read it; tests/cuda compares them with the CPU): the engine's configuration checks accept it, run
// here without a GPU (LLMEngine::prepare, which refused the combination before).
TEST(KvCacheFp8Engine, CudaBackendTakesEverySparsePrefillPolicy) {
  for (const SparsePrefillPolicy policy : {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kMInference,
                                           SparsePrefillPolicy::kFlexPrefill, SparsePrefillPolicy::kAvgPool}) {
    EngineConfig ec = peaked_config("fp8");
    ec.model.backend = Backend::kCuda;
    ec.sparse_prefill.policy = policy;
    ec.sparse_prefill.dense_layers = 1;
    EXPECT_NO_THROW(LLMEngine::prepare(ec)) << sparse_prefill_policy_name(policy);
  }
}

}  // namespace
}  // namespace nanovllm
