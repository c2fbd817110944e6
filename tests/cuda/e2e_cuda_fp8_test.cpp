// Block-scaled FP8 checkpoints on the CUDA backend end to end (docs/fp8.md), against the CPU backend on the same
// checkpoint (which runs the dequantized weights in f32: the reference). The GPU differs by bf16 activations and,
// past kFp8MmaGemvMaxTokens rows (prefill, decode batches of more than 16), by the activations' e4m3 quantization, so
// greedy tokens may flip where the reference's top two are close. The rule (as e2e_cuda_test.cpp's, with a wider
// margin for the activation quantization): tokens agree until the first difference, and there the GPU's token is
// within kNearTie of the reference's top-1 logprob; agreeing steps' logprobs within kLogprobTol. Printed: the
// agreement and the largest logprob difference (the "report its logprob deltas").
// Also: the bf16 checkpoint of the same seed under --quantization fp8 gives the FP8 checkpoint's tokens (the same
// codes and scales), --quantization none runs the dequantized bf16 weights, decode runs through graphs and eager
// alike, and one sequence at a time (the weight-streaming GEMV) passes the same rule.
// The GEMM past 16 rows is the runners' default: cuBLASLt's block-scaled matmul where it runs, the mma.sync kernel for
// the rest (test_cuda_fp8_linear.cpp tests both against the CPU references).
// CudaFp8MoeEngine: an FP8 Qwen3-MoE checkpoint whose experts stay fp8 on the GPU (moe_fp8.cu's kernels for one
// token, moe_experts.cu's kFp8 GEMV for decode batches, the tiled GEMM's fp8 tiles for prefill), under the same rule against the CPU backend (a flipped routing choice is
// a near-tie of the router, then the continuation is not compared), one sequence at a time (the fused bs = 1 decode
// kernels through graphs) and batched, graphs vs eager, --quantization fp8 on its bf16 checkpoint, two GPUs; the
// runner's upload log shows the experts' bytes halved (a byte a weight, not bf16's two).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <string>

#include <cuda_runtime.h>

#include "nanovllm/core/logging.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/model/test_model.h"
#include "support/fp8_moe_model.h"
#include "support/process_scratch_dir.h"

namespace nanovllm {
namespace {

// e4m3 activations keep 4 significant bits (2^-4 relative error per element, ~2% per projection output on
// random data), a few times the bf16 rounding the bf16 CUDA tests allow 0.1 for.
constexpr double kNearTie = 0.5;
constexpr double kLogprobTol = 0.5;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// A Qwen3 whose projections are whole 128 x 128 blocks (q 512, k / v 128 rows, hidden 512, I 1024: every K / 128
// a multiple of 4, so cuBLASLt's GEMM takes them all), tied like the peaked `tiny` model.
nlohmann::json fp8_config(bool fp8) {
  nlohmann::json j = test_model_config("tiny");
  j["hidden_size"] = 512;
  j["intermediate_size"] = 1024;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 128;
  if (fp8) j["quantization_config"] = fp8_quantization_config();
  return j;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int n : {1, 15, 16, 17, 100, 129}) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back((i * 7919 + n * 31) % 512);
    p.push_back(ids);
  }
  return p;
}

// A Qwen3-MoE in whole 128 x 128 blocks (hidden 256, 2 q heads and 1 KV head of 128, dense I 256): layer 0 dense,
// layers 1-3 sparse with 8 experts (top 2) of moe_intermediate_size 256 (128 a rank at TP 2); the experts are ~80%
// of its projection weights. Tied like the tiny model.
nlohmann::json fp8_moe_config(bool fp8) {
  nlohmann::json j = testing::moe_in_whole_fp8_blocks();
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array({0});
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 256;
  j["tie_word_embeddings"] = true;
  if (fp8) j["quantization_config"] = fp8_quantization_config();
  return j;
}

std::vector<RequestOutput> run(const std::filesystem::path& model, Backend backend, const std::string& quantization,
                               int64_t max_num_seqs = 8, bool eager = false, int64_t tensor_parallel = 1) {
  EngineConfig ec;
  ec.model.path = model;
  ec.model.backend = backend;
  ec.model.quantization = quantization;
  ec.model.enforce_eager = eager;
  ec.parallel.tensor_parallel_size = tensor_parallel;
  ec.cache.num_kv_blocks = 128;
  ec.scheduler.max_num_batched_tokens = 256;
  ec.scheduler.max_num_seqs = max_num_seqs;
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 64;
  sp.logprobs = 5;
  return LLM(ec).generate(prompts(), sp);
}

// The near-tie rule of the GPU's continuations against the reference's; prints the agreement.
void expect_near_reference(const std::vector<RequestOutput>& gpu, const std::vector<RequestOutput>& ref,
                           const std::string& what) {
  int64_t steps = 0, agreeing = 0, identical = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(gpu[i].token_ids.size(), ref[i].token_ids.size());
    identical += gpu[i].token_ids == ref[i].token_ids;
    for (size_t t = 0; t < ref[i].token_ids.size(); ++t) {
      ++steps;
      const auto& top = ref[i].logprobs[t];
      if (gpu[i].token_ids[t] == ref[i].token_ids[t]) {
        ++agreeing;
        const double d = std::fabs(gpu[i].logprobs[t][0].logprob - top[0].logprob);
        worst = std::max(worst, d);
        EXPECT_LE(d, kLogprobTol) << what << ": prompt " << i << " step " << t;
        continue;
      }
      double ours = -1e30;
      for (const TokenLogprob& e : top)
        if (e.id == gpu[i].token_ids[t]) ours = e.logprob;
      EXPECT_GE(ours, top[0].logprob - kNearTie) << what << ": prompt " << i << " step " << t << ": GPU chose "
                                                 << gpu[i].token_ids[t] << ", the reference " << top[0].id;
      steps += static_cast<int64_t>(ref[i].token_ids.size() - t - 1);  // the continuations part here
      break;
    }
  }
  std::printf("%s: %lld/%lld steps agree with the CPU reference before any flip (%.1f%%), %lld/%zu continuations "
              "identical, max |logprob diff| %.4f\n", what.c_str(), static_cast<long long>(agreeing),
              static_cast<long long>(steps), 100.0 * static_cast<double>(agreeing) / static_cast<double>(steps),
              static_cast<long long>(identical), ref.size(), worst);
}

class CudaFp8Engine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<testing::ProcessScratchDir>("nanovllm-cuda-fp8");
    write_test_model(scratch_->path() / "fp8", fp8_config(true), 21);
    write_test_model(scratch_->path() / "bf16", fp8_config(false), 21);
  }
  static void TearDownTestSuite() { scratch_.reset(); }
  static std::filesystem::path dir(const char* sub) { return scratch_->path() / sub; }
  static std::unique_ptr<testing::ProcessScratchDir> scratch_;
};
std::unique_ptr<testing::ProcessScratchDir> CudaFp8Engine::scratch_;

TEST_F(CudaFp8Engine, GreedyFollowsTheCpuReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto cpu = run(dir("fp8"), Backend::kCpu, "auto");
  const auto gpu = run(dir("fp8"), Backend::kCuda, "auto");  // 6 sequences: decode through the fp8 GEMM
  expect_near_reference(gpu, cpu, "fp8 batch of 6" );
  const auto one = run(dir("fp8"), Backend::kCuda, "auto", /*max_num_seqs=*/1);  // decode through the GEMV
  expect_near_reference(one, cpu, "fp8 one sequence at a time" );
  const auto eager = run(dir("fp8"), Backend::kCuda, "auto", 8, /*eager=*/true);
  for (size_t i = 0; i < gpu.size(); ++i) EXPECT_EQ(eager[i].token_ids, gpu[i].token_ids) << "graphs vs eager, prompt " << i;
  const auto none = run(dir("fp8"), Backend::kCuda, "none");  // dequantized to bf16 at load
  expect_near_reference(none, cpu, "fp8 checkpoint dequantized to bf16");
}

TEST_F(CudaFp8Engine, QuantizingTheBf16CheckpointAtLoadGivesTheFp8CheckpointsTokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto fp8 = run(dir("fp8"), Backend::kCuda, "auto");
  const auto quantized = run(dir("bf16"), Backend::kCuda, "fp8");
  for (size_t i = 0; i < fp8.size(); ++i) EXPECT_EQ(quantized[i].token_ids, fp8[i].token_ids) << "prompt " << i;
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

int gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

class CudaFp8MoeEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<testing::ProcessScratchDir>("nanovllm-cuda-fp8-moe");
    write_test_model(scratch_->path() / "fp8", fp8_moe_config(true), 23);
    write_test_model(scratch_->path() / "bf16", fp8_moe_config(false), 23);
  }
  static void TearDownTestSuite() { scratch_.reset(); }
  static std::filesystem::path dir(const char* sub) { return scratch_->path() / sub; }
  static std::unique_ptr<testing::ProcessScratchDir> scratch_;
};
std::unique_ptr<testing::ProcessScratchDir> CudaFp8MoeEngine::scratch_;

// The bytes the CUDA runner uploads for `model` under `quantization` (its "loaded N GB of weights" log line).
double uploaded_gb(const std::filesystem::path& model, const std::string& quantization) {
  const LogLevel level = log_level();
  set_log_level(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  run(model, Backend::kCuda, quantization, 1);
  const std::string log = ::testing::internal::GetCapturedStderr();
  set_log_level(level);
  std::smatch m;
  EXPECT_TRUE(std::regex_search(log, m, std::regex("loaded ([0-9.e+-]+) GB of weights"))) << log;
  return m.empty() ? 0 : std::stod(m[1].str());
}

TEST_F(CudaFp8MoeEngine, GreedyFollowsTheCpuReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto cpu = run(dir("fp8"), Backend::kCpu, "auto");
  const auto gpu = run(dir("fp8"), Backend::kCuda, "auto");  // batches: the T <= 32 expert kernels, prefill's GEMM
  expect_near_reference(gpu, cpu, "fp8 MoE batch of 6");
  const auto one = run(dir("fp8"), Backend::kCuda, "auto", /*max_num_seqs=*/1);  // bs = 1: the fused decode kernels
  expect_near_reference(one, cpu, "fp8 MoE one sequence at a time");
  const auto eager = run(dir("fp8"), Backend::kCuda, "auto", 1, /*eager=*/true);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(eager[i].token_ids, one[i].token_ids) << "graphs vs eager, prompt " << i;
  const auto none = run(dir("fp8"), Backend::kCuda, "none");  // experts dequantized to bf16 at load
  expect_near_reference(none, cpu, "fp8 MoE checkpoint dequantized to bf16");
}

TEST_F(CudaFp8MoeEngine, ExpertsStayFp8OnTheGpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // bf16: ~11.6 MB. fp8 with fp8 experts: every projection a byte (+ a scale per 16384), the embedding bf16: ~5.9 MB.
  // Experts dequantized to bf16 would leave ~10.6 MB.
  const double fp8 = uploaded_gb(dir("fp8"), "auto"), bf16 = uploaded_gb(dir("fp8"), "none");
  std::printf("fp8 MoE weights uploaded: %.4f GB (fp8), %.4f GB (--quantization none)\n", fp8, bf16);
  EXPECT_GT(bf16, 0);
  EXPECT_LT(fp8, 0.6 * bf16) << "the experts are not kept in fp8";
}

TEST_F(CudaFp8MoeEngine, QuantizingTheBf16CheckpointAtLoadGivesTheFp8CheckpointsTokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const auto fp8 = run(dir("fp8"), Backend::kCuda, "auto");
  const auto quantized = run(dir("bf16"), Backend::kCuda, "fp8");
  for (size_t i = 0; i < fp8.size(); ++i) EXPECT_EQ(quantized[i].token_ids, fp8[i].token_ids) << "prompt " << i;
}

TEST_F(CudaFp8MoeEngine, TwoGpusFollowTheCpuReference) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const auto cpu = run(dir("fp8"), Backend::kCpu, "auto");
  const auto two = run(dir("fp8"), Backend::kCuda, "auto", 8, false, /*tensor_parallel=*/2);  // 128 of Im a rank
  expect_near_reference(two, cpu, "fp8 MoE on two GPUs");
}

}  // namespace
}  // namespace nanovllm
