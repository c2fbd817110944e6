// Attention prologue: split qkv, optional per-head RMSNorm of q and k, RoPE, q -> q_out, k/v -> paged caches
// at slot_mapping (an fp8 cache: each (token, KV head) row quantized with its scale, kv_cache.h). Math follows
// HF's fp32 path:
//   angle = float(pos) * inv_freq[i] (fp32), cos/sin of that fp32 angle, times attention_scaling;
//   pair (a, b) of frequency i: a' = a cos - b sin;  b' = b cos + a sin, where the pair is
//   (i, i + D/2) for rotate_half (Qwen, Llama) and (2i, 2i + 1) for interleaved (GLM-4, whose RoPE covers
//   only the first 2 * pairs elements; the rest pass through unchanged).
#include <cmath>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/rms_norm_row.h"
#include "nanovllm/kernels/cpu/rope_row.h"
#include "nanovllm/kernels/cpu/kv_row.h"

namespace nanovllm::cpu {

void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const float* inv_freq, float attention_scaling, const KvCacheTensor& k_cache,
                  const KvCacheTensor& v_cache, const AttentionMetadata& meta, int64_t rope_pairs, bool interleaved) {
  const int64_t T = q_out.dim(0), Hq = q_out.dim(1), D = q_out.dim(2);
  const int64_t Hk = k_cache.dim(2);
  const int64_t half = D / 2;
  const int64_t pairs = rope_pairs > 0 ? rope_pairs : half;
  NANOVLLM_CHECK(pairs <= half && (interleaved || pairs == half), "qkv_prologue (cpu): ", pairs,
                 " RoPE frequencies for head_dim ", D, (interleaved ? "" : " (rotate_half needs head_dim / 2)"));
  const int64_t W = (Hq + 2 * Hk) * D;  // qkv row width
  const bool has_qn = q_norm.defined() && q_norm.numel() > 0;
  const bool has_kn = k_norm.defined() && k_norm.numel() > 0;
  const int32_t* pos = positions.data_as<const int32_t>();         // [T]
  const int32_t* slots = meta.slot_mapping.data_as<const int32_t>();  // [T]
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* row = scratch_f32(buf, 3 * D + 2 * half);  // [D] row, [D] q_norm w, [D] k_norm w, [D/2] cos, sin
    float* qn = row + D;
    float* kn = row + 2 * D;
    float* cos_t = row + 3 * D;
    float* sin_t = cos_t + half;
    if (has_qn) load_row_f32(q_norm.data(), q_norm.dtype(), 0, D, qn);
    if (has_kn) load_row_f32(k_norm.data(), k_norm.dtype(), 0, D, kn);
    for (int64_t t = b; t < e; ++t) {
      rope_table_row(cos_t, sin_t, pos[t], inv_freq, pairs, attention_scaling);
      for (int64_t h = 0; h < Hq; ++h) {
        load_row_f32(qkv.data(), qkv.dtype(), t * W + h * D, D, row);
        if (has_qn) rms_norm_row(row, qn, D, eps);
        rope_row(row, cos_t, sin_t, pairs, half, interleaved);
        store_row_f32(row, D, q_out.data(), q_out.dtype(), (t * Hq + h) * D);
      }
      const int64_t slot = slots[t];
      if (slot < 0) continue;  // padding token: nothing to cache
      for (int64_t h = 0; h < Hk; ++h) {
        load_row_f32(qkv.data(), qkv.dtype(), t * W + (Hq + h) * D, D, row);
        if (has_kn) rms_norm_row(row, kn, D, eps);
        rope_row(row, cos_t, sin_t, pairs, half, interleaved);
        store_kv_row(row, k_cache, slot * Hk + h);
        load_row_f32(qkv.data(), qkv.dtype(), t * W + (Hq + Hk + h) * D, D, row);
        store_kv_row(row, v_cache, slot * Hk + h);
      }
    }
  }, 4);
}

}  // namespace nanovllm::cpu
