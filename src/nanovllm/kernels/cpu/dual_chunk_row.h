// One (query row, KV head) of Dual Chunk Attention on the CPU (kernels/dual_chunk_ops.h), shared by the dense kernel
// and the sparse ones (block-sparse prefill, sparse decode) so that a sparse selection of every key gives bit-identical
// results. As vLLM's backend computes it (DualChunkFlashAttentionImpl._dual_chunk_flash_attn_prefill_func /
// _merge_attn_outputs): per region (intra, successive, inter) a partial attention of that region's keys, in increasing
// position, with that region's query rotation, giving an output and a log-sum-exp; then the partial outputs merged by
// their log-sum-exps. fp32 scores, fp64 softmax sums. Either cache format of kv_cache.h (an fp8 row is dequantized to
// fp32 first, as attend_row does).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cpu/attention_row.h"
#include "nanovllm/kernels/cpu/kv_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

// The region of the key at position j for the query at position p (j <= p), chunks of L positions: 0 the query's own
// chunk (intra), 1 the previous one (successive), 2 any earlier (inter). Indexes q [3, T, Hq, D].
inline int dual_chunk_region(int64_t p, int64_t j, int64_t L) {
  const int64_t c = p / L, cj = j / L;
  return cj == c ? 0 : cj + 1 == c ? 1 : 2;
}

// One partial attention: out[g, :] = softmax_j(q[g] . k_j * scale) v_j over the n keys whose cache slots
// slot_of(0..n-1) gives, and lse[g] = log sum_j exp(q[g] . k_j * scale), for the G query heads of KV head kvh (n >= 1).
// q, out [G, D]; kv_row [D] and scores [G, n] scratch.
template <typename SlotOf>
void attend_range_lse(const float* q, int64_t G, int64_t kvh, int64_t n, SlotOf slot_of,
                      const KvCacheTensor& k_cache, const KvCacheTensor& v_cache, float scale, float* kv_row,
                      float* scores, float* out, double* lse) {
  const int64_t Hk = k_cache.dim(2), D = k_cache.dim(3);
  for (int64_t j = 0; j < n; ++j) {
    load_kv_row(k_cache, int64_t{slot_of(j)} * Hk + kvh, kv_row);
    for (int64_t g = 0; g < G; ++g) scores[g * n + j] = dot_f32(q + g * D, kv_row, D) * scale;
  }
  for (int64_t g = 0; g < G; ++g) lse[g] = softmax_in_place(scores + g * n, n);
  std::fill(out, out + G * D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    load_kv_row(v_cache, int64_t{slot_of(j)} * Hk + kvh, kv_row);
    for (int64_t g = 0; g < G; ++g) {
      const float w = scores[g * n + j];
      float* o = out + g * D;
      for (int64_t d = 0; d < D; ++d) o[d] += w * kv_row[d];
    }
  }
}

// Dual Chunk Attention of one (query row, KV head): q3 [3][G][D] holds the row's G query heads in the three rotations
// (intra, successive, inter); count[r] keys of region r, the j-th of them in cache slot slot_of(r, j), in increasing
// position. out [G, D] gets the merged attention: weights exp(lse_r - max) / sum over the regions with keys, in region
// order; zeros when no region has a key.
template <typename SlotOf>
void dual_chunk_attend_row(const float* q3, int64_t G, int64_t kvh, const int64_t count[3], SlotOf slot_of,
                           const KvCacheTensor& k_cache, const KvCacheTensor& v_cache, float scale, float* out) {
  const int64_t D = k_cache.dim(3);
  thread_local std::vector<float> buf, score_buf;
  thread_local std::vector<double> lse_buf;
  float* parts = scratch_f32(buf, 3 * G * D + D);  // [3, G, D] partial outputs, [D] K/V row
  float* kv_row = parts + 3 * G * D;
  if (lse_buf.size() < static_cast<size_t>(3 * G)) lse_buf.resize(static_cast<size_t>(3 * G));
  double* lse = lse_buf.data();  // [3, G]
  int parts_used = 0;
  int used[3];
  for (int r = 0; r < 3; ++r) {
    if (count[r] <= 0) continue;
    float* scores = scratch_f32(score_buf, G * count[r]);  // [G, keys]
    attend_range_lse(
        q3 + r * G * D, G, kvh, count[r], [&](int64_t j) { return slot_of(r, j); }, k_cache, v_cache, scale, kv_row,
        scores, parts + r * G * D, lse + r * G);
    used[parts_used++] = r;
  }
  for (int64_t g = 0; g < G; ++g) {
    float* o = out + g * D;
    if (parts_used == 0) {
      std::fill(o, o + D, 0.0f);
      continue;
    }
    double mx = -INFINITY;
    for (int i = 0; i < parts_used; ++i) mx = std::max(mx, lse[used[i] * G + g]);
    double w[3], wsum = 0.0;
    for (int i = 0; i < parts_used; ++i) wsum += (w[i] = std::exp(lse[used[i] * G + g] - mx));
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0.0;
      for (int i = 0; i < parts_used; ++i) acc += w[i] * parts[(used[i] * G + g) * D + d];
      o[d] = static_cast<float>(acc / wsum);
    }
  }
}

}  // namespace nanovllm::cpu
