// One head row's RoPE on the CPU (shared by qkv_prologue and dual_chunk_qkv_prologue): HF's fp32 math,
// angle = float(pos) * inv_freq[i], cos/sin of that fp32 angle times a multiplier, then per pair (a, b)
// a' = a cos - b sin, b' = b cos + a sin.
#pragma once

#include <cmath>
#include <cstdint>

namespace nanovllm::cpu {

// cos_t/sin_t[0, pairs) = cos/sin(float(pos) * inv_freq[i]) * multiplier.
inline void rope_table_row(float* cos_t, float* sin_t, int64_t pos, const float* inv_freq, int64_t pairs,
                           float multiplier) {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < pairs; ++i) {
    const float angle = p * inv_freq[i];
    cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * multiplier;
    sin_t[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * multiplier;
  }
}

// `pairs` rotations of frequency i over the pairs (i, i + stride) (stride = D/2) or, interleaved, (2i, 2i + 1).
inline void rope_row(float* x, const float* cos_t, const float* sin_t, int64_t pairs, int64_t stride,
                     bool interleaved) {
  for (int64_t i = 0; i < pairs; ++i) {
    float* a = interleaved ? x + 2 * i : x + i;
    float* b = interleaved ? a + 1 : a + stride;
    const float x1 = *a, x2 = *b;
    *a = x1 * cos_t[i] - x2 * sin_t[i];
    *b = x2 * cos_t[i] + x1 * sin_t[i];
  }
}

}  // namespace nanovllm::cpu
