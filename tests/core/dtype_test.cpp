#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/error.h"
#include "nanovllm/core/tensor.h"

using namespace nanovllm;

TEST(DType, Bf16RoundTripIsExactForBf16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << h;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // Just above halfway rounds up.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536)), 1.0078125f);
  // 1 + 3 * 2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): goes up.
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.015625f);
}

TEST(DType, F16RoundTripIsExactForF16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h << " " << f;
  }
}

TEST(DType, F16MatchesReferenceRounding) {
  // Against a double-precision reference of round-to-nearest-even onto the f16 grid.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-30.f, 17.f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(1.0f + static_cast<float>(rng() % 1000000) / 1e6f, static_cast<int>(mag(rng))) *
                    ((rng() & 1) ? -1.f : 1.f);
    const float y = f16_to_f32(f32_to_f16(x));
    // y must be one of the two f16 neighbours of x, and the nearer one.
    const double ax = std::fabs(static_cast<double>(x));
    if (ax >= 65520.0) { EXPECT_TRUE(std::isinf(y)); continue; }
    const double err = std::fabs(static_cast<double>(y) - x);
    const int e = ax < std::ldexp(1.0, -14) ? -14 : std::ilogb(ax);
    const double ulp = std::ldexp(1.0, e - 10);
    EXPECT_LE(err, ulp / 2 + 1e-30) << x << " -> " << y;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.f)), 65504.f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
}

TEST(Error, CheckThrowsWithFileAndLine) {
  try {
    NANOVLLM_CHECK(1 + 1 == 3, "math is ", "broken: ", 42);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tests/core/dtype_test.cpp:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("math is broken: 42"), std::string::npos) << msg;
  }
}

TEST(Tensor, ShapeReshapeSlice) {
  Buffer buf(cpu_allocator(), DType::kF32, Shape{4, 3});
  float* p = static_cast<float*>(buf.data());
  for (int i = 0; i < 12; ++i) p[i] = static_cast<float>(i);
  TensorView v = buf.view();
  EXPECT_EQ(v.numel(), 12);
  EXPECT_EQ(v.nbytes(), 48u);
  TensorView rows = v.slice_rows(1, 3);
  EXPECT_EQ(rows.dim(0), 2);
  EXPECT_EQ(rows.data_as<float>()[0], 3.0f);
  EXPECT_THROW(v.reshape(Shape{5, 2}), Error);
  EXPECT_THROW(v.slice_rows(2, 5), Error);
  EXPECT_EQ(v.reshape(Shape{2, 6}).shape(), (Shape{2, 6}));
  EXPECT_THROW(Shape({2, -1}), Error);
}

// e4m3 by its definition: (-1)^s * 2^(e - 7) * (1 + m / 8), subnormals 2^-6 * m / 8; S.1111.111 is NaN.
static double e4m3_by_definition(uint32_t code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(DType, Fp8E4M3DecodesEveryCodeByDefinition) {
  for (uint32_t code = 0; code < 256; ++code) {
    const float f = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), e4m3_by_definition(code)) << code;
    EXPECT_EQ(f32_to_fp8_e4m3(f), code) << code;  // round trip, the sign of zero included
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), kFp8E4M3Max);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(DType, Fp8E4M3RoundsToNearestEvenAndSaturates) {
  // The nearest finite code by search (ties: the even code), for random magnitudes across the whole range.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-12.0, 9.5);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(std::exp2(exponent(rng))) * (i % 2 ? -1.0f : 1.0f);
    uint32_t best = 0;
    double best_err = 1e30;
    for (uint32_t c = 0; c < 0x7f; ++c) {
      const double err = std::fabs(std::fabs(static_cast<double>(x)) - e4m3_by_definition(c));
      if (err < best_err || (err == best_err && (c & 1) == 0)) {
        best_err = err;
        best = c;
      }
    }
    if (std::fabs(x) > 448.0f) best = 0x7e;  // saturation
    ASSERT_EQ(f32_to_fp8_e4m3(x), best | (x < 0 ? 0x80u : 0u)) << x;
  }
  // Exact ties: 1 + 1/16 lies between 1 (even) and 1.125; 1 + 3/16 between 1.125 and 1.25 (even).
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1.1875f)), 1.25f);
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(3 * std::ldexp(1.0f, -10))), std::ldexp(2.0f, -9));  // subnormal tie
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1e6f)), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity())), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::nanf("")))));
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "F8_E4M3");
}
