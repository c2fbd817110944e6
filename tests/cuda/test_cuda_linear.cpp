// CUDA linear (cuBLASLt) against the CPU reference on identical bf16 values.
// Accuracy: products of bf16 values are exact in fp32, so the only differences are the fp32 summation
// order (~1e-7 relative) and the final rounding of bf16 outputs (<= 2^-8 relative per element, NMSE
// ~1e-6). Thresholds: NMSE <= 1e-5 (bf16 out) / 1e-9 (f32 out), and per element
// |err| <= 1e-2 * rms(ref) + 5e-3 |ref| (bf16; a bias added after a bf16 GEMM output
// rounds twice) or 1e-4 * rms(ref) + 1e-5 |ref| (f32).
#include "cuda_test_util.h"

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::random_bf16;

void check_linear(int64_t T, int64_t N, int64_t K, DType out_t, int bias_mode, std::mt19937& rng,
                  ops::LinearHint hint = ops::LinearHint::kNone) {
  // bias_mode: 0 none, 1 bias in the output dtype (epilogue), 2 bias in the other dtype (separate add)
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  auto b = random_bf16(static_cast<size_t>(N), rng, -2.0f, 2.0f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(out_t, {T, N});
  d_out.fill_bytes(0xff);
  const DType bias_t = bias_mode == 0 ? DType::kBF16 : bias_mode == 1 ? out_t
                                                      : (out_t == DType::kF32 ? DType::kBF16 : DType::kF32);
  std::vector<float> b_f32 = b.f32;  // values exactly representable in bf16 either way
  DeviceTensor d_b = bias_t == DType::kBF16 ? DeviceTensor(DType::kBF16, {N}, b.bits)
                                            : DeviceTensor(DType::kF32, {N}, b_f32);
  TensorView bias_view = bias_mode ? d_b.view() : TensorView();
  cuda_ops::linear(d_out.view(), d_x.view(), d_w.view(), bias_view, cuda_test::on(), hint);
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu::linear(cuda_test::host_view(ref, {T, N}), cuda_test::host_view(x.f32, {T, K}),
              cuda_test::host_view(w.f32, {N, K}), bias_mode ? cuda_test::host_view(b_f32, {N}) : TensorView());
  const std::vector<float> got = d_out.download_f32();
  double ss = 0;
  for (float r : ref) ss += static_cast<double>(r) * r;
  const float rms = static_cast<float>(std::sqrt(ss / static_cast<double>(ref.size())));
  const bool bf = out_t == DType::kBF16;
  const std::string what = "linear T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " out=" + std::string(dtype_name(out_t)) + " bias=" + std::to_string(bias_mode);
  EXPECT_LE(cuda_test::nmse(got, ref), bf ? 1e-5 : 1e-9) << what;
  cuda_test::expect_close(got, ref, (bf ? 1e-2f : 1e-4f) * rms, bf ? 5e-3f : 1e-5f, what);
}

TEST(CudaLinear, MatchesReferenceAcrossShapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(11);
  for (int64_t T : {1, 15, 16, 17, 129, 257}) {
    check_linear(T, 64, 128, DType::kBF16, 0, rng);
    check_linear(T, 1000, 1024, DType::kBF16, 0, rng);
    check_linear(T, 1000, 1024, DType::kF32, 0, rng);  // LM head style: fp32 logits
    check_linear(T, 24, 40, DType::kBF16, 0, rng);     // small odd-ish sizes
  }
  check_linear(1024, 4096, 512, DType::kBF16, 0, rng);
}

// The qkv projection's scheduling hint (one CTA per SM for decode sizes) computes the same matmul, with
// and without bias (Qwen2's qkv bias), at decode sizes and beyond (cuBLASLt, the hint has no effect).
TEST(CudaLinear, BeforeAttentionHintKeepsTheValues) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(13);
  for (int64_t T : {1, 3, 16, 40}) {
    check_linear(T, 4096, 1024, DType::kBF16, 0, rng, ops::LinearHint::kBeforeAttention);  // Qwen3-0.6B qkv
    check_linear(T, 1152, 896, DType::kBF16, 1, rng, ops::LinearHint::kBeforeAttention);   // Qwen2-0.5B-like, bias
    check_linear(T, 24, 40, DType::kBF16, 0, rng, ops::LinearHint::kBeforeAttention);
  }
}

TEST(CudaLinear, BiasEpilogueAndSeparateAdd) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(12);
  for (int64_t T : {1, 17, 129}) {
    for (DType out_t : {DType::kBF16, DType::kF32}) {
      check_linear(T, 384, 256, out_t, 1, rng);
      check_linear(T, 384, 256, out_t, 2, rng);
    }
  }
}

}  // namespace
}  // namespace nanovllm
