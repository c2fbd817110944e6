// Reimplementation of transformers' RoPE parameter functions (modeling_rope_utils.py), fp32 like torch:
//   base_pow[i] = float(base) ** (float(2i) / float(D))    torch float32 pow; here pow in fp64 of the
//                                                          fp32 inputs, rounded once (within 1 ulp of
//                                                          torch's vectorised powf)
//   inv_freq[i] = 1.0f / base_pow[i]
// Scalars that torch combines with float32 tensors are rounded to float first, as torch does; scalar
// Python math (yarn correction range, mscale) stays in fp64.
#include "nanovllm/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "nanovllm/core/error.h"

namespace nanovllm {
namespace {

// base ** (arange(0, D, 2).float() / D) in fp32.
std::vector<float> base_powers(double base, int64_t D) {
  std::vector<float> p(static_cast<size_t>(D / 2));
  const float b = static_cast<float>(base);
  for (int64_t i = 0; i < D / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(D);
    p[static_cast<size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(b), static_cast<double>(e)));
  }
  return p;
}

std::vector<float> default_inv_freq(double base, int64_t D) {
  std::vector<float> inv = base_powers(base, D);
  for (float& v : inv) v = 1.0f / v;
  return inv;
}

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index at which the wavelength completes `rotations` turns over the original context.
double yarn_correction_dim(double rotations, int64_t D, double base, double max_pos) {
  return (static_cast<double>(D) * std::log(max_pos / (rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

RopeTable yarn(const ModelConfig& cfg, int64_t D) {
  const RopeScaling& rs = cfg.rope_scaling;
  const double base = cfg.rope_theta;
  const double factor = rs.factor;
  const double orig = static_cast<double>(rs.original_max_position_embeddings > 0
                                              ? rs.original_max_position_embeddings
                                              : cfg.max_position_embeddings);
  NANOVLLM_CHECK(orig > 0, "rope_scaling (yarn): original_max_position_embeddings and max_position_embeddings "
                 "are both missing");
  double attention = rs.attention_factor;
  if (attention <= 0.0) {
    attention = (rs.mscale != 0.0 && rs.mscale_all_dim != 0.0)
                    ? yarn_mscale(factor, rs.mscale) / yarn_mscale(factor, rs.mscale_all_dim)
                    : yarn_mscale(factor, 1.0);
  }
  // HF: `beta_fast or 32`, `beta_slow or 1` (a 0 means the default).
  const double beta_fast = rs.beta_fast != 0.0 ? rs.beta_fast : 32.0;
  const double beta_slow = rs.beta_slow != 0.0 ? rs.beta_slow : 1.0;
  double low = yarn_correction_dim(beta_fast, D, base, orig);
  double high = yarn_correction_dim(beta_slow, D, base, orig);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(D - 1));
  if (low == high) high += 0.001;  // HF: prevent the singularity

  const std::vector<float> pos = base_powers(base, D);
  const float f = static_cast<float>(factor);
  const float lo = static_cast<float>(low);
  const float span = static_cast<float>(high - low);
  RopeTable r;
  r.inv_freq.resize(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    const float extrapolation = 1.0f / pos[i];
    const float interpolation = 1.0f / (f * pos[i]);
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float extra_w = 1.0f - ramp;
    r.inv_freq[i] = interpolation * (1.0f - extra_w) + extrapolation * extra_w;
  }
  r.attention_scaling = static_cast<float>(attention);
  return r;
}

RopeTable llama3(const ModelConfig& cfg, int64_t D) {
  const RopeScaling& rs = cfg.rope_scaling;
  NANOVLLM_CHECK(rs.original_max_position_embeddings > 0,
                 "rope_scaling (llama3): original_max_position_embeddings is required");
  NANOVLLM_CHECK(rs.high_freq_factor != rs.low_freq_factor,
                 "rope_scaling (llama3): high_freq_factor must differ from low_freq_factor");
  const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
  // Python scalars, compared against / combined with float32 tensors (so rounded to float there).
  const float low_wavelen = static_cast<float>(old_ctx / rs.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_ctx / rs.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float factor = static_cast<float>(rs.factor);
  const float old_ctx_f = static_cast<float>(old_ctx);
  const float low_ff = static_cast<float>(rs.low_freq_factor);
  const float ff_span = static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);

  RopeTable r;
  r.inv_freq = default_inv_freq(cfg.rope_theta, D);
  for (float& inv : r.inv_freq) {
    const float wavelen = two_pi / inv;
    const float scaled = wavelen > low_wavelen ? inv / factor : inv;  // long wavelengths: interpolate
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {     // medium: smooth blend
      const float smooth = (old_ctx_f / wavelen - low_ff) / ff_span;
      inv = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      inv = scaled;
    }
  }
  return r;
}

}  // namespace

RopeTable compute_rope(const ModelConfig& cfg) {
  const int64_t D = cfg.rope_dim();  // HF: int(head_dim * partial_rotary_factor)
  NANOVLLM_CHECK(D > 0 && D % 2 == 0, "config.json: the rotary dimension ", D, " must be even and > 0");
  NANOVLLM_CHECK(D <= cfg.head_dim, "config.json: the rotary dimension ", D, " exceeds head_dim ", cfg.head_dim);
  NANOVLLM_CHECK(cfg.rope_theta > 1.0 && std::isfinite(cfg.rope_theta), "config.json: rope_theta ",
                 cfg.rope_theta, " must be > 1");
  const RopeScaling& rs = cfg.rope_scaling;
  if (rs.type != RopeScaling::Type::kNone)
    NANOVLLM_CHECK(rs.factor > 0.0 && std::isfinite(rs.factor), "config.json: rope_scaling.factor ", rs.factor,
                   " must be > 0");
  switch (rs.type) {
    case RopeScaling::Type::kNone:
      return RopeTable{default_inv_freq(cfg.rope_theta, D), 1.0f};
    case RopeScaling::Type::kLinear: {
      RopeTable r{default_inv_freq(cfg.rope_theta, D), 1.0f};
      const float f = static_cast<float>(rs.factor);
      for (float& v : r.inv_freq) v /= f;
      return r;
    }
    case RopeScaling::Type::kYarn:
      return yarn(cfg, D);
    case RopeScaling::Type::kLlama3:
      return llama3(cfg, D);
  }
  NANOVLLM_FAIL("compute_rope: unknown rope scaling type");
}

}  // namespace nanovllm
