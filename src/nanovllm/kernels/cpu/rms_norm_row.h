// One row of HF-style RMSNorm in place (shared by rms_norm and the q/k norm of qkv_prologue).
#pragma once

#include <cmath>
#include <cstdint>

namespace nanovllm::cpu {

// row[i] = w[i] * (row[i] * rsqrt(mean(row^2) + eps)); w == nullptr: no weight.
inline void rms_norm_row(float* row, const float* w, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(row[i]) * row[i];
  const float var = static_cast<float>(ss / static_cast<double>(n));
  const float r = 1.0f / std::sqrt(var + eps);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) row[i] = w[i] * (row[i] * r);
  } else {
    for (int64_t i = 0; i < n; ++i) row[i] *= r;
  }
}

}  // namespace nanovllm::cpu
