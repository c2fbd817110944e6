// Dual Chunk Attention's prologue (kernels/dual_chunk_ops.h): qkv_prologue's math (split, optional q/k
// RMSNorm, HF's fp32 RoPE, one rounding) with three query rotations and the key rotated at its position
// modulo chunk_len. The length factor multiplies the cos/sin tables (as YaRN's attention factor does), so a
// scaled value is rotated and scaled before its single rounding.
#include <algorithm>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_dual_chunk_ops.h"
#include "nanovllm/kernels/cpu/rms_norm_row.h"
#include "nanovllm/kernels/cpu/rope_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void dual_chunk_qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                             TensorView positions, const float* inv_freq, float attention_scaling,
                             const ops::DualChunkParams& dca, TensorView k_cache, TensorView v_cache,
                             const AttentionMetadata& meta) {
  const int64_t T = q_out.dim(1), Hq = q_out.dim(2), D = q_out.dim(3);
  const int64_t Hk = k_cache.dim(2);
  const int64_t half = D / 2;
  const int64_t W = (Hq + 2 * Hk) * D;  // qkv row width
  const bool has_qn = q_norm.defined() && q_norm.numel() > 0;
  const bool has_kn = k_norm.defined() && k_norm.numel() > 0;
  const int32_t* pos = positions.data_as<const int32_t>();            // [T]
  const int32_t* slots = meta.slot_mapping.data_as<const int32_t>();  // [T]
  const int32_t* lens = dca.scales() ? meta.dca_scale_lens.data_as<const int32_t>() : nullptr;  // [T]
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    // [D] row, [D] normed row, [D] q_norm w, [D] k_norm w, 3 x ([D/2] cos, [D/2] sin): intra (= key), successive, inter
    float* row = scratch_f32(buf, 4 * D + 6 * half);
    float* normed = row + D;
    float* qn = row + 2 * D;
    float* kn = row + 3 * D;
    float* tables = row + 4 * D;
    auto cos_of = [&](int r) { return tables + 2 * r * half; };
    auto sin_of = [&](int r) { return tables + (2 * r + 1) * half; };
    if (has_qn) load_row_f32(q_norm.data(), q_norm.dtype(), 0, D, qn);
    if (has_kn) load_row_f32(k_norm.data(), k_norm.dtype(), 0, D, kn);
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = pos[t];
      const float scale = lens ? ops::dual_chunk_length_scale(lens[t], dca.original_max_position_embeddings) : 1.0f;
      const float mult = attention_scaling * scale;
      rope_table_row(cos_of(0), sin_of(0), dca.intra_position(p), inv_freq, half, mult);
      rope_table_row(cos_of(1), sin_of(1), dca.successive_position(p), inv_freq, half, mult);
      rope_table_row(cos_of(2), sin_of(2), dca.inter_position(), inv_freq, half, mult);
      for (int64_t h = 0; h < Hq; ++h) {
        load_row_f32(qkv.data(), qkv.dtype(), t * W + h * D, D, normed);
        if (has_qn) rms_norm_row(normed, qn, D, eps);
        for (int r = 0; r < 3; ++r) {
          std::copy(normed, normed + D, row);
          rope_row(row, cos_of(r), sin_of(r), half, half, /*interleaved=*/false);
          store_row_f32(row, D, q_out.data(), q_out.dtype(), ((r * T + t) * Hq + h) * D);
        }
      }
      const int64_t slot = slots[t];
      if (slot < 0) continue;  // padding token: nothing to cache
      for (int64_t h = 0; h < Hk; ++h) {
        load_row_f32(qkv.data(), qkv.dtype(), t * W + (Hq + h) * D, D, row);
        if (has_kn) rms_norm_row(row, kn, D, eps);
        rope_row(row, cos_of(0), sin_of(0), half, half, /*interleaved=*/false);
        store_row_f32(row, D, k_cache.data(), k_cache.dtype(), (slot * Hk + h) * D);
        load_row_f32(qkv.data(), qkv.dtype(), t * W + (Hq + Hk + h) * D, D, row);
        store_row_f32(row, D, v_cache.data(), v_cache.dtype(), (slot * Hk + h) * D);
      }
    }
  }, 4);
}

}  // namespace nanovllm::cpu
