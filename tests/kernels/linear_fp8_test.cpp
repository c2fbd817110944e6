// ops::linear_fp8 on the CPU backend (the reference of the CUDA fp8 kernels): equal to ops::linear over the
// dequantized weights (f64 vs f32 sums: within 1e-5 of the terms' magnitude), its activation-quantized variant exact where the
// activations are e4m3 values already and within e4m3's error otherwise, and bad shapes refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "nanovllm/core/dtype.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/kernels/ops.h"
#include "support/expect_error.h"

using namespace nanovllm;
using nanovllm::testing::expect_error;

namespace {

struct Fp8Weight {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes;
  std::vector<float> scale, dequantized;
  TensorView view() { return TensorView(codes.data(), DType::kF8E4M3, Shape{n, k}); }
  TensorView scale_view() { return TensorView(scale.data(), DType::kF32, Shape{n / 128, k / 128}); }
};

Fp8Weight random_weight(int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = normal(rng) * (1.0f + static_cast<float>(i % 7));  // uneven blocks
  Fp8Weight f{n, k, std::vector<uint8_t>(w.size()), std::vector<float>(static_cast<size_t>(n / 128 * (k / 128))), {}};
  quantize_fp8_blocks(w.data(), n, k, f.codes.data(), f.scale.data());
  f.dequantized.resize(w.size());
  dequantize_fp8_run(f.codes.data(), f.scale.data(), k, 0, n * k, f.dequantized.data());
  return f;
}

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    ref += double{want[i]} * want[i];
  }
  return err / ref;
}

}  // namespace

TEST(LinearFp8, EqualsTheDenseLinearOverTheDequantizedWeights) {
  std::mt19937 rng(5);
  for (auto [T, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 128}, {3, 256, 384}, {17, 384, 256}}) {
    Fp8Weight w = random_weight(N, K, rng);
    std::vector<float> x = random_vector(static_cast<size_t>(T * K), rng), bias = random_vector(static_cast<size_t>(N), rng);
    std::vector<float> got(static_cast<size_t>(T * N)), want(got.size());
    const TensorView in(x.data(), DType::kF32, Shape{T, K}), b(bias.data(), DType::kF32, Shape{N});
    ops::linear_fp8(TensorView(got.data(), DType::kF32, Shape{T, N}), in, w.view(), w.scale_view(), b);
    ops::linear(TensorView(want.data(), DType::kF32, Shape{T, N}), in,
                TensorView(w.dequantized.data(), DType::kF32, Shape{N, K}), b);
    // ops::linear sums in f32: within 1e-5 of sum |w x| (the terms' magnitude; cancellation is not error).
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double magnitude = std::fabs(bias[n]);
        for (int64_t k = 0; k < K; ++k) magnitude += std::fabs(double{w.dequantized[n * K + k]} * x[t * K + k]);
        ASSERT_NEAR(got[t * N + n], want[t * N + n], 1e-5 * magnitude) << "T " << T << " N " << N << " K " << K;
      }
  }
}

TEST(LinearFp8, QuantizedActivationsAreExactOnE4m3ValuesAndCloseOtherwise) {
  std::mt19937 rng(6);
  const int64_t T = 5, N = 256, K = 256;
  Fp8Weight w = random_weight(N, K, rng);
  // Rows whose every 128-group holds e4m3 values with max |x| = 448 * 2^-8: their quantization is exact.
  std::vector<float> exact(static_cast<size_t>(T * K));
  std::uniform_int_distribution<int> code(0, 0x7e);
  for (int64_t i = 0; i < T * K; ++i)
    exact[i] = fp8_e4m3_to_f32(static_cast<uint8_t>(code(rng) | (i % 3 ? 0x80 : 0))) * std::ldexp(1.0f, -8);
  for (int64_t g = 0; g < T * K; g += 128) exact[g] = 448.0f * std::ldexp(1.0f, -8);
  std::vector<float> a(static_cast<size_t>(T * N)), b(a.size());
  ops::linear_fp8(TensorView(a.data(), DType::kF32, Shape{T, N}), TensorView(exact.data(), DType::kF32, Shape{T, K}),
                  w.view(), w.scale_view(), TensorView());
  cpu::linear_fp8_quantized(TensorView(b.data(), DType::kF32, Shape{T, N}),
                            TensorView(exact.data(), DType::kF32, Shape{T, K}), w.view(), w.scale_view(), TensorView());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 1e-5 * (1 + std::fabs(a[i]))) << i;
  // Any activations: e4m3 keeps 4 significant bits (relative error <= 2^-4 per element, ~2^-4 / sqrt(3) rms).
  std::vector<float> x = random_vector(static_cast<size_t>(T * K), rng);
  ops::linear_fp8(TensorView(a.data(), DType::kF32, Shape{T, N}), TensorView(x.data(), DType::kF32, Shape{T, K}),
                  w.view(), w.scale_view(), TensorView());
  cpu::linear_fp8_quantized(TensorView(b.data(), DType::kF32, Shape{T, N}),
                            TensorView(x.data(), DType::kF32, Shape{T, K}), w.view(), w.scale_view(), TensorView());
  const double e = nmse(b, a);
  EXPECT_GT(e, 0.0);
  EXPECT_LT(e, 4e-3);
}

TEST(LinearFp8, BadShapesAndDtypesAreNamed) {
  std::mt19937 rng(7);
  Fp8Weight w = random_weight(256, 128, rng);
  std::vector<float> x(2 * 128), out(2 * 256);
  const TensorView in(x.data(), DType::kF32, Shape{2, 128}), o(out.data(), DType::kF32, Shape{2, 256});
  expect_error([&] { ops::linear_fp8(o, in, TensorView(w.dequantized.data(), DType::kF32, Shape{256, 128}),
                                     w.scale_view(), TensorView()); }, {"linear_fp8", "weight", "F32", "F8_E4M3"});
  std::vector<uint8_t> odd(200 * 128);
  expect_error([&] { ops::linear_fp8(TensorView(out.data(), DType::kF32, Shape{2, 200}), in,
                                     TensorView(odd.data(), DType::kF8E4M3, Shape{200, 128}), w.scale_view(),
                                     TensorView()); }, {"linear_fp8", "[200, 128]", "multiples of 128"});
  expect_error([&] { ops::linear_fp8(o, in, w.view(), TensorView(w.scale.data(), DType::kF32, Shape{1, 2}),
                                     TensorView()); }, {"linear_fp8", "weight_scale"});
  expect_error([&] { ops::linear_fp8(o, in, w.view(), TensorView(w.codes.data(), DType::kF8E4M3, Shape{2, 1}),
                                     TensorView()); }, {"linear_fp8", "weight_scale", "F32"});
}

// ops::linear_fp8_silu: act = silu(gate) * up of the projection over the dequantized weights (computed here in
// f64 from the formula), gate_up the projection itself; a weight that cannot split into whole gate and up blocks
// and a wrong act are refused by name.
TEST(LinearFp8, SiluOfTheGateUpProjection) {
  std::mt19937 rng(8);
  const int64_t T = 3, I = 128, K = 256;
  Fp8Weight w = random_weight(2 * I, K, rng);
  std::vector<float> x = random_vector(static_cast<size_t>(T * K), rng);
  std::vector<float> gate_up(static_cast<size_t>(T * 2 * I)), act(static_cast<size_t>(T * I));
  const TensorView in(x.data(), DType::kF32, Shape{T, K}), gu(gate_up.data(), DType::kF32, Shape{T, 2 * I});
  ops::linear_fp8_silu(TensorView(act.data(), DType::kF32, Shape{T, I}), in, w.view(), w.scale_view(), gu);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += double{w.dequantized[i * K + k]} * x[t * K + k];
        u += double{w.dequantized[(I + i) * K + k]} * x[t * K + k];
      }
      ASSERT_NEAR(gate_up[t * 2 * I + i], g, 1e-5 * (1 + std::fabs(g)));
      ASSERT_NEAR(gate_up[t * 2 * I + I + i], u, 1e-5 * (1 + std::fabs(u)));
      const double want = g / (1.0 + std::exp(-g)) * u;  // f32 gate and up, f32 silu: ~1e-7 relative each
      ASSERT_NEAR(act[t * I + i], want, 1e-5 * (1 + std::fabs(want) + std::fabs(u))) << "t " << t << " i " << i;
    }
  std::vector<uint8_t> odd(384 * 256);
  std::vector<float> odd_scale(3 * 2), odd_gu(static_cast<size_t>(T * 384)), odd_act(static_cast<size_t>(T * 192));
  expect_error([&] { ops::linear_fp8_silu(TensorView(odd_act.data(), DType::kF32, Shape{T, 192}), in,
                                          TensorView(odd.data(), DType::kF8E4M3, Shape{384, 256}),
                                          TensorView(odd_scale.data(), DType::kF32, Shape{3, 2}),
                                          TensorView(odd_gu.data(), DType::kF32, Shape{T, 384})); },
               {"linear_fp8_silu", "[384, 256]", "multiple of 256"});
  expect_error([&] { ops::linear_fp8_silu(TensorView(act.data(), DType::kF32, Shape{T, 2 * I}), in, w.view(),
                                          w.scale_view(), gu); }, {"linear_fp8_silu", "act"});
}
