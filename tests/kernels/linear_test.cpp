// linear: out = in @ W^T + b against a double reference over odd sizes and weight dtypes.
#include <chrono>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;
using test::random_tensor;

std::vector<double> linear_ref(const HostTensor& in, const HostTensor& w, const HostTensor* bias, int64_t T,
                               int64_t K, int64_t N) {
  const std::vector<double> x = in.to_double(), wd = w.to_double();
  std::vector<double> out(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? bias->get(n) : 0.0;
      for (int64_t k = 0; k < K; ++k) s += x[t * K + k] * wd[n * K + k];
      out[t * N + n] = s;
    }
  return out;
}

TEST(Linear, MatchesDoubleReferenceOverSizesAndWeightDtypes) {
  std::mt19937 rng(11);
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t T : {1, 15, 16, 17, 129}) {
      for (int64_t K : {1, 7, 16, 17, 129}) {
        for (int64_t N : {1, 3, 16, 17, 129}) {
          const bool with_bias = (T + K + N) % 2 == 0;
          HostTensor in = random_tensor(DType::kF32, {T, K}, rng);
          HostTensor w = random_tensor(wd, {N, K}, rng);
          HostTensor b = random_tensor(DType::kF32, {N}, rng);
          HostTensor out(DType::kF32, {T, N});
          ops::linear(out.v, in.v, w.v, with_bias ? b.v : TensorView(), {});
          SCOPED_TRACE(::testing::Message() << dtype_name(wd) << " T=" << T << " K=" << K << " N=" << N);
          test::expect_close_f32(out, linear_ref(in, w, with_bias ? &b : nullptr, T, K, N), "linear");
        }
      }
    }
  }
}

TEST(Linear, Bf16ActivationsWithF32Output) {
  std::mt19937 rng(12);
  const int64_t T = 5, K = 64, N = 33;
  HostTensor in = random_tensor(DType::kBF16, {T, K}, rng);
  HostTensor w = random_tensor(DType::kBF16, {N, K}, rng);
  HostTensor b = random_tensor(DType::kBF16, {N}, rng);
  HostTensor out(DType::kF32, {T, N});
  ops::linear(out.v, in.v, w.v, b.v);
  test::expect_close_f32(out, linear_ref(in, w, &b, T, K, N), "bf16 in");
  HostTensor out16(DType::kBF16, {T, N});
  ops::linear(out16.v, in.v, w.v, b.v);
  const std::vector<double> ref = linear_ref(in, w, &b, T, K, N);
  for (size_t i = 0; i < ref.size(); ++i)  // bf16 output: rounding of the fp32 result, rtol 2^-8
    ASSERT_NEAR(out16.get(static_cast<int64_t>(i)), ref[i], std::abs(ref[i]) / 256 + 1e-5);
}

TEST(Linear, Is1024SquaredTimes64FastEnough) {
  std::mt19937 rng(13);
  const int64_t T = 64, K = 1024, N = 1024;
  HostTensor in = random_tensor(DType::kF32, {T, K}, rng);
  HostTensor w = random_tensor(DType::kBF16, {N, K}, rng);
  HostTensor out(DType::kF32, {T, N});
  ops::linear(out.v, in.v, w.v, TensorView());  // warm-up (scratch allocation, pool start)
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kReps = 5;
  for (int i = 0; i < kReps; ++i) ops::linear(out.v, in.v, w.v, TensorView());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kReps;
  std::printf("linear T=64 K=1024 N=1024 bf16 weights: %.2f ms\n", ms);
  // Spot-check a few outputs, then a generous bound (shared 2-core CI machines).
  const std::vector<double> x = in.to_double();
  for (int64_t n : {0, 511, 1023}) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += x[63 * K + k] * w.get(n * K + k);
    EXPECT_NEAR(out.get(63 * N + n), s, 1e-4);
  }
  EXPECT_LT(ms, 200.0);
}

}  // namespace
}  // namespace nanovllm
