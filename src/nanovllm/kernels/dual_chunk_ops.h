// Op entry points of Dual Chunk Attention (DCA; docs/dual_chunk_attention.md has every rule and where vLLM,
// the reference that serves the 1M-token Qwen models, states it). Same rules as ops.h: each validates, then
// dispatches on the tensors' device (kernels/cpu/dual_chunk_*.cpp, kernels/cuda/dual_chunk_*.cu; bf16 there).
//
// With L = chunk_len = chunk_size - local_size, a query at position p lies in chunk c = p / L. Keys are cached
// rotated at their position modulo L. The query is rotated three ways:
//   intra      at p mod L                         for the keys of its own chunk, [c L, p] (causal);
//   successive at min(p mod L + L, chunk_size)    for the keys of the previous chunk, [(c-1) L, c L);
//   inter      at min(2 L - 1, chunk_size)        for the keys of every earlier chunk, [0, (c-1) L);
// and the three partial attentions are merged by their log-sum-exps (one softmax over all keys 0..p).
// With original_max_position_embeddings > 0 a query and a key of a sequence of n tokens are each multiplied
// by dual_chunk_length_scale(n) (the logit by both), n = meta.dca_scale_lens[t] of the token that wrote it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

struct DualChunkParams {
  int64_t chunk_len = 0;   // L = chunk_size - local_size, > 0
  int64_t chunk_size = 0;  // the successive and inter rotations are clamped here, >= L
  int64_t original_max_position_embeddings = 0;  // > 0: length scaling from meta.dca_scale_lens

  int64_t intra_position(int64_t p) const { return p % chunk_len; }
  int64_t successive_position(int64_t p) const { return std::min(p % chunk_len + chunk_len, chunk_size); }
  int64_t inter_position() const { return std::min(2 * chunk_len - 1, chunk_size); }
  bool scales() const { return original_max_position_embeddings > 0; }
};

// CUDA (kernels/cuda/dual_chunk_attention.cu): each key tile is scored with one query rotation, so chunk_len must be a
// multiple of the largest key tile; the kernels are built for these head dims (bf16).
constexpr int64_t kCudaDualChunkLenMultiple = 128;
inline bool cuda_dual_chunk_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

// The factor a query or key written for a sequence of n tokens carries: vLLM's
// (0.1 * log(n / original_max_position_embeddings) + 1).clip(min=1) (DualChunkFlashAttentionMetadata), 1 when
// original_max_position_embeddings is 0.
inline float dual_chunk_length_scale(int64_t n, int64_t original_max_position_embeddings) {
  if (original_max_position_embeddings <= 0) return 1.0f;
  const double f = 0.1 * std::log(static_cast<double>(n) / static_cast<double>(original_max_position_embeddings)) + 1.0;
  return static_cast<float>(std::max(f, 1.0));
}

// qkv_prologue (ops.h) for DCA: split qkv [T, (Hq + 2 Hk) D], optional per-head q/k RMSNorm, then
//   q_out[0, t] = q rotated at intra_position(positions[t]),
//   q_out[1, t] = q rotated at successive_position(positions[t]),
//   q_out[2, t] = q rotated at inter_position(),
//   the key rotated at intra_position(positions[t]) into k_cache at meta.slot_mapping[t] (-1: not cached), v as is;
// with dca.scales() the three queries and the key are multiplied by dual_chunk_length_scale(
// meta.dca_scale_lens[t]). q_out [3, T, Hq, D]; rope: the model's (plain RoPE, rotate_half: DCA comes without rope
// scaling); caches [NB, BS, Hk, D].
void dual_chunk_qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                             TensorView positions, const RopeParams& rope, const DualChunkParams& dca,
                             TensorView k_cache, TensorView v_cache, const AttentionMetadata& meta, Stream s = {});

// Causal paged attention for a mixed batch (paged_attention's rows, positions and cache layout) with DCA: query
// row t at position p attends cache positions 0..p of its sequence, key j scored with q[0, t] (j in p's chunk),
// q[1, t] (the previous chunk) or q[2, t] (earlier); scores times `scale`. out [T, Hq, D]; q [3, T, Hq, D] from
// dual_chunk_qkv_prologue; caches [NB, BS, Hk, D].
// CUDA: chunk_len a multiple of kCudaDualChunkLenMultiple, head_dim cuda_dual_chunk_head_dim.
void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const DualChunkParams& dca, float scale, Stream s = {});

}  // namespace nanovllm::ops
