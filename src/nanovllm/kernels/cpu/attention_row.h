// One (query row, KV head) of paged attention on the CPU, shared by the dense and the sparse kernels so
// that a sparse selection covering every key gives bit-identical results: the same key order, fp32
// scores (8-lane partial sums), softmax with max subtraction and an fp64 denominator, fp32 output sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cpu/kv_row.h"

namespace nanovllm::cpu {

inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (int64_t i = n8; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Scores sc[0, n) (n >= 1) -> their softmax, in place: max subtraction, exponentials and their sum in fp64, one
// fp32 reciprocal. Returns the log-sum-exp, log sum_j exp(sc[j]).
inline double softmax_in_place(float* sc, int64_t n) {
  const float m = *std::max_element(sc, sc + n);
  double denom = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double w = std::exp(static_cast<double>(sc[j]) - m);
    sc[j] = static_cast<float>(w);
    denom += w;
  }
  const float inv = static_cast<float>(1.0 / denom);
  for (int64_t j = 0; j < n; ++j) sc[j] *= inv;
  return m + std::log(denom);
}

// out[g, :] = softmax_j(q[g] . k_j * scale) v_j over the n keys j whose cache slots slot_of(0..n-1) gives,
// for the G query heads of KV head `kvh`. q_out: [G, D] queries on entry, [G, D] outputs on return.
// k_cache, v_cache [NB, BS, Hk, D] (either format of kv_cache.h: an fp8 row is dequantized to fp32 first);
// a slot is block * BS + offset.
template <typename SlotOf>
void attend_row(float* q_out, int64_t G, int64_t kvh, int64_t n, SlotOf slot_of, const KvCacheTensor& k_cache,
                const KvCacheTensor& v_cache, float scale) {
  const int64_t Hk = k_cache.dim(2), D = k_cache.dim(3);
  const bool kv_f32 = k_cache.dtype() == DType::kF32 && v_cache.dtype() == DType::kF32;
  thread_local std::vector<float> kv_buf, score_buf;
  float* krow = scratch_f32(kv_buf, 2 * D);  // [D] k, [D] v (non-f32 caches)
  float* vrow = krow + D;
  float* scores = scratch_f32(score_buf, G * n);  // [G, n]
  for (int64_t j = 0; j < n; ++j) {
    const int64_t row = int64_t{slot_of(j)} * Hk + kvh;
    const float* k = kv_f32 ? k_cache.data_as<const float>() + row * D : krow;
    if (!kv_f32) load_kv_row(k_cache, row, krow);
    for (int64_t g = 0; g < G; ++g) scores[g * n + j] = dot_f32(q_out + g * D, k, D) * scale;
  }
  for (int64_t g = 0; g < G; ++g) softmax_in_place(scores + g * n, n);
  // The queries are no longer needed: accumulate the outputs in their place.
  std::fill(q_out, q_out + G * D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t row = int64_t{slot_of(j)} * Hk + kvh;
    const float* v = kv_f32 ? v_cache.data_as<const float>() + row * D : vrow;
    if (!kv_f32) load_kv_row(v_cache, row, vrow);
    for (int64_t g = 0; g < G; ++g) {
      const float w = scores[g * n + j];
      float* o = q_out + g * D;
      for (int64_t d = 0; d < D; ++d) o[d] += w * v[d];
    }
  }
}

}  // namespace nanovllm::cpu
