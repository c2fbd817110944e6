// A Qwen3MoeForCausalLM end to end on the CUDA backend (the qwen3-moe-tiny preset, tied and peaked like the
// dense tiny model of e2e_cuda_test.cpp): decode through CUDA graphs and eagerly, and tensor parallel over two
// GPUs, against the CPU backend. bf16 may flip a greedy choice where two candidates are within bf16 noise, and a
// flipped routing choice moves a token's MLP output: tokens must agree until the first difference, and there the
// CPU's logprobs of the two tokens must be a near-tie (within kNearTie); later tokens are not compared.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "nanovllm/llm/llm.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

constexpr double kNearTie = 0.1;

int gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

EngineConfig moe_config(Backend backend) {
  EngineConfig ec;
  ec.model.path = testing::preset_model_dir(
      "qwen3-moe-tiny", "cuda-moe", {{"tie_word_embeddings", true}, {"head_dim", 64}, {"num_key_value_heads", 1}}, 21);
  ec.cache.block_size = 16;
  ec.scheduler.max_num_batched_tokens = 256;
  ec.cache.num_kv_blocks = 128;
  ec.model.backend = backend;
  return ec;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> ps;
  for (int n : {1, 15, 16, 17, 100, 129}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 31) % 512);
    ps.push_back(p);
  }
  return ps;
}

SamplingParams greedy() {
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 40;  // decodes cross block boundaries
  sp.logprobs = 5;
  return sp;
}

// `got` follows `want` (the CPU run, with its top-5 logprobs) up to a near-tie.
void expect_agree(const RequestOutput& got, const RequestOutput& want, const std::string& what) {
  ASSERT_EQ(got.token_ids.size(), want.token_ids.size()) << what;
  for (size_t t = 0; t < want.token_ids.size(); ++t) {
    if (got.token_ids[t] == want.token_ids[t]) continue;
    double lp_got = -1e30;
    for (const TokenLogprob& e : want.logprobs[t])
      if (e.id == got.token_ids[t]) lp_got = e.logprob;
    EXPECT_GE(lp_got, want.logprobs[t][0].logprob - kNearTie)
        << what << " step " << t << ": " << got.token_ids[t] << " instead of " << want.token_ids[t] << ", not a near-tie";
    return;
  }
}

TEST(CudaMoeEngine, GraphsAndEagerFollowTheCpuBackend) {
  if (gpus() < 1) GTEST_SKIP() << "no CUDA device";
  EngineConfig ec = moe_config(Backend::kCuda);
  const auto ps = prompts();
  const auto graphs = LLM(ec).generate(ps, greedy());  // decode through CUDA graphs (buckets 1..8)
  ec.model.enforce_eager = true;
  const auto eager = LLM(ec).generate(ps, greedy());
  ec.model.backend = Backend::kCpu;
  const auto cpu = LLM(ec).generate(ps, greedy());
  for (size_t i = 0; i < ps.size(); ++i) {
    expect_agree(graphs[i], cpu[i], "graphs, prompt " + std::to_string(i));
    expect_agree(eager[i], cpu[i], "eager, prompt " + std::to_string(i));
  }
}

TEST(CudaMoeEngine, TwoGpusFollowOneGpu) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  EngineConfig ec = moe_config(Backend::kCuda);
  const auto ps = prompts();
  ec.model.backend = Backend::kCpu;
  const auto cpu = LLM(ec).generate(ps, greedy());
  ec.model.backend = Backend::kCuda;
  ec.parallel.tensor_parallel_size = 2;
  const auto two = LLM(ec).generate(ps, greedy());
  for (size_t i = 0; i < ps.size(); ++i) expect_agree(two[i], cpu[i], "TP2, prompt " + std::to_string(i));
}

}  // namespace
}  // namespace nanovllm
