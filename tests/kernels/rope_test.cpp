// compute_rope against the transformers formulas evaluated directly in double, plus numbers derived by
// hand from them. Tolerance: relative 1e-6 per inv_freq (a few fp32 ulps: the table is fp32 like HF's).
#include "nanovllm/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <gtest/gtest.h>

#include "nanovllm/core/error.h"

namespace nanovllm {
namespace {

ModelConfig rope_config(int64_t D, double theta) {
  ModelConfig c;
  c.head_dim = D;
  c.rope_theta = theta;
  c.max_position_embeddings = 40960;
  return c;
}

double default_inv(double base, int64_t D, int64_t i) {
  return 1.0 / std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(D));
}

void expect_rel(double got, double want, const char* what, int64_t i) {
  EXPECT_NEAR(got, want, std::abs(want) * 1e-6) << what << " i=" << i;
}

TEST(Rope, DefaultMatchesFormulaAndHandValues) {
  for (int64_t D : {16, 64, 128}) {
    for (double base : {10000.0, 1e6, 500000.0}) {
      const RopeTable r = compute_rope(rope_config(D, base));
      ASSERT_EQ(r.inv_freq.size(), static_cast<size_t>(D / 2));
      EXPECT_EQ(r.attention_scaling, 1.0f);
      for (int64_t i = 0; i < D / 2; ++i) expect_rel(r.inv_freq[i], default_inv(base, D, i), "default", i);
    }
  }
  const RopeTable r = compute_rope(rope_config(128, 1e6));
  EXPECT_EQ(r.inv_freq[0], 1.0f);
  expect_rel(r.inv_freq[16], 0.031622776601683794, "1e6^-1/4", 16);  // 1e6^(-32/128)
  expect_rel(r.inv_freq[32], 1e-3, "1e6^-1/2", 32);                  // 1e6^(-64/128)
}

TEST(Rope, LinearDividesByFactor) {
  ModelConfig c = rope_config(64, 10000.0);
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 2.5;
  const RopeTable r = compute_rope(c);
  EXPECT_EQ(r.attention_scaling, 1.0f);
  for (int64_t i = 0; i < 32; ++i) expect_rel(r.inv_freq[i], default_inv(1e4, 64, i) / 2.5, "linear", i);
}

ModelConfig qwen3_yarn() {
  ModelConfig c = rope_config(128, 1e6);
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 32768;
  return c;
}

// inv = interpolation * ramp + extrapolation * (1 - ramp), ramp = clamp((i - low) / (high - low), 0, 1).
double yarn_expected(double base, int64_t D, double factor, double low, double high, int64_t i) {
  const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
  const double extra = default_inv(base, D, i);
  return extra / factor * ramp + extra * (1.0 - ramp);
}

TEST(Rope, YarnQwen3HandDerivedRange) {
  // find_correction_dim(32) = 128 ln(32768 / (64 pi)) / (2 ln 1e6) = 23.596 -> floor 23;
  // find_correction_dim(1)  = 128 ln(32768 / (2 pi))  / (2 ln 1e6) = 39.651 -> ceil 40.
  const RopeTable r = compute_rope(qwen3_yarn());
  EXPECT_NEAR(r.attention_scaling, 1.1386294361, 1e-6);  // 0.1 ln 4 + 1
  for (int64_t i = 0; i < 64; ++i) {
    expect_rel(r.inv_freq[i], yarn_expected(1e6, 128, 4.0, 23.0, 40.0, i), "yarn", i);
    if (i <= 23) expect_rel(r.inv_freq[i], default_inv(1e6, 128, i), "yarn extrapolated", i);
    if (i >= 40) expect_rel(r.inv_freq[i], default_inv(1e6, 128, i) / 4, "yarn interpolated", i);
  }
}

TEST(Rope, YarnWithoutTruncationUsesFractionalRange) {
  ModelConfig c = qwen3_yarn();
  c.rope_scaling.truncate = false;
  const RopeTable r = compute_rope(c);
  const double low = 128 * std::log(32768 / (32 * 2 * std::numbers::pi)) / (2 * std::log(1e6));
  const double high = 128 * std::log(32768 / (1 * 2 * std::numbers::pi)) / (2 * std::log(1e6));
  EXPECT_NEAR(low, 23.5959476, 1e-6);
  EXPECT_NEAR(high, 39.6508807, 1e-6);
  for (int64_t i = 0; i < 64; ++i) expect_rel(r.inv_freq[i], yarn_expected(1e6, 128, 4.0, low, high, i), "yarn", i);
  // Differs from the truncated table inside the ramp.
  EXPECT_NE(r.inv_freq[30], compute_rope(qwen3_yarn()).inv_freq[30]);
}

TEST(Rope, YarnAttentionFactorVariants) {
  ModelConfig c = qwen3_yarn();
  c.rope_scaling.factor = 40.0;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 0.707;
  // (0.1 ln 40 + 1) / (0.1 * 0.707 ln 40 + 1)
  EXPECT_NEAR(compute_rope(c).attention_scaling, 1.0857263993, 1e-6);
  c.rope_scaling.mscale_all_dim = 0.0;  // only one given: plain get_mscale(factor)
  EXPECT_NEAR(compute_rope(c).attention_scaling, 0.1 * std::log(40.0) + 1.0, 1e-6);
  c.rope_scaling.attention_factor = 0.8;  // explicit wins
  EXPECT_NEAR(compute_rope(c).attention_scaling, 0.8, 1e-7);
  // Custom betas move the range: beta_fast 16 -> low = floor(128 ln(32768/(32 pi)) / (2 ln 1e6)) = 26.
  ModelConfig b = qwen3_yarn();
  b.rope_scaling.beta_fast = 16.0;
  const RopeTable r = compute_rope(b);
  const double low = std::floor(128 * std::log(32768 / (16 * 2 * std::numbers::pi)) / (2 * std::log(1e6)));
  EXPECT_EQ(low, 26.0);
  for (int64_t i = 0; i < 64; ++i) expect_rel(r.inv_freq[i], yarn_expected(1e6, 128, 4.0, 26.0, 40.0, i), "beta", i);
}

TEST(Rope, YarnFallsBackToMaxPositionEmbeddings) {
  ModelConfig c = qwen3_yarn();
  c.rope_scaling.original_max_position_embeddings = 0;
  c.max_position_embeddings = 32768;  // same range as the explicit original length
  const RopeTable a = compute_rope(c), b = compute_rope(qwen3_yarn());
  EXPECT_EQ(a.inv_freq, b.inv_freq);
}

TEST(Rope, Llama3HandDerivedRegimes) {
  // Llama 3.1: theta 5e5, factor 8, low/high freq factor 1/4, original 8192 ->
  // wavelen_i = 2 pi 5e5^(i/64); < 2048 (high-freq) for i <= 28, > 8192 (low-freq) for i >= 35.
  ModelConfig c = rope_config(128, 500000.0);
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  const RopeTable r = compute_rope(c);
  EXPECT_EQ(r.attention_scaling, 1.0f);
  for (int64_t i = 0; i < 64; ++i) {
    const double inv = default_inv(5e5, 128, i);
    const double wavelen = 2 * std::numbers::pi / inv;
    double want;
    if (i <= 28) {
      ASSERT_LT(wavelen, 2048.0);
      want = inv;
    } else if (i >= 35) {
      ASSERT_GT(wavelen, 8192.0);
      want = inv / 8;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / 3.0;
      want = (1 - smooth) * inv / 8 + smooth * inv;
    }
    expect_rel(r.inv_freq[i], want, "llama3", i);
  }
}

TEST(Rope, RejectsBadConfigs) {
  EXPECT_THROW(compute_rope(rope_config(63, 1e4)), Error);
  EXPECT_THROW(compute_rope(rope_config(0, 1e4)), Error);
  EXPECT_THROW(compute_rope(rope_config(64, 1.0)), Error);
  ModelConfig c = rope_config(64, 1e4);
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  EXPECT_THROW(compute_rope(c), Error);  // no original_max_position_embeddings
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 0.0;
  EXPECT_THROW(compute_rope(c), Error);
}

}  // namespace
}  // namespace nanovllm
