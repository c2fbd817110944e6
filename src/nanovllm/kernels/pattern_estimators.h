// Op entry points of the sparse prefill pattern estimators: from a prefill chunk's queries and its sequence's keys, a
// BlockSparsePattern (sparse_ops.h) for block_sparse_prefill_attention. The policies in sparse/ pick one and its knobs
// (estimator_params.h); these compute. Same rules as ops.h: each validates, then dispatches on the tensors' device (CPU
// reference kernels, CUDA kernels: kernels/cuda/*_estimate.cu).
//
// Common contract. One sequence (meta.num_seqs == 1): q [T, Hq, D] holds the queries of positions [ctx - T, ctx), ctx =
// meta.max_context_len (== context_lens[0]); its keys [0, ctx) are read from k_cache [NB, BS, Hk, D] through
// meta.block_tables, as paged_attention reads them. `scale` is the attention's softmax scale. Outputs, for block size
// bs = pattern.block_size and NQB = ceil(ctx / bs): pattern.block_counts [Hk, NQB] and pattern.block_index [Hk, NQB,
// MAXB >= NQB] i32; column lists ([Hk, NQB] and [Hk, NQB, MAXC]) are required by vertical_slash_estimate and otherwise
// optional (written empty). Per KV head the pattern is the union of its GQA group's query heads' choices, and always
// lists the sink block 0 and the diagonal block of every query block. Rows of query blocks before the chunk are not
// written (block_sparse_prefill_attention ignores them; writing NQB-wide rows for every earlier block would cost
// O(NQB^2) per chunk, 1 GiB per chunk at 1M tokens). Estimates are deterministic. An fp8 cache's keys are read
// dequantized (kv_cache.h; CPU only: on CUDA the estimators refuse an fp8 cache).
//
// With Dual Chunk Attention (the overloads taking `const DualChunkParams* dca`, non-null; docs/sparse_attention.md,
// "With Dual Chunk Attention"): q [3, T, Hq, D] holds dual_chunk_qkv_prologue's rotations (intra, successive, inter),
// and every q.k an estimator computes takes the query in the rotation of the key's region for that query (the key in
// the query's chunk, the previous one, or earlier), as dual_chunk_attention scores it; a pooled (block-mean) query is
// the mean of those rotated rows. bs must divide dca->chunk_len (a query block and a key block then each lie in one
// chunk).
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/estimator_params.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm::ops {

// XAttention: per query head, q.k of stride x stride tiles as their antidiagonal sums, softmax of every tile row over
// its causal tiles, summed into (query block, key block) masses; per query block the key blocks (sink and diagonal
// first, then by decreasing mass) until tau of the block's mass is covered. stride divides bs.
void xattention_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                         const AttentionMetadata& meta, float scale, const XAttentionParams& params, Stream s = {});
void xattention_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                         const AttentionMetadata& meta, float scale, const XAttentionParams& params,
                         const DualChunkParams* dca, Stream s = {});

// MInference vertical-slash: per query head, the causal softmax of the chunk's last `last_q` queries, summed per key
// position (vertical) and per diagonal d = query position - key position (slash); columns [0, sink_tokens) and
// diagonals [0, recent_diagonals) forced, then the `vertical` best columns and `slash` best diagonals. Per query block:
// the key blocks its rows meet along the chosen diagonals, and the chosen columns before the block that those blocks do
// not hold. Column lists need MAXC >= vertical_slash_max_columns(ctx, Hq / Hk, params.vertical).
void vertical_slash_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                             const AttentionMetadata& meta, float scale, const VerticalSlashParams& params,
                             Stream s = {});
void vertical_slash_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                             const AttentionMetadata& meta, float scale, const VerticalSlashParams& params,
                             const DualChunkParams* dca, Stream s = {});
inline int64_t vertical_slash_max_columns(int64_t ctx, int64_t group, int64_t vertical) {
  return group * vertical < ctx ? group * vertical : ctx;
}

// FlexPrefill: per query head, the causal softmax of the chunk's last bs queries gives the attention per key position
// (vertical: mean over those queries) and per diagonal (slash); pooled per block, it is compared with softmax(mean last
// query . block-mean keys) by the square-rooted Jensen-Shannon divergence. Below tau the head is query-aware: over all
// (query block of the chunk, causal key block) pairs, softmax(block-mean query . block-mean key) per query block, the
// pairs covering gamma of the total by decreasing score, plus ceil(min_budget / bs) vertical and slash blocks.
// Otherwise vertical-slash: the best vertical blocks (key block columns, block 0 first) and slash blocks (block
// diagonals i - s, the main one first), as many as cover gamma of the last queries' attention (tokens / bs + 1, at
// least ceil(min_budget / bs)).
void flexprefill_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                          const AttentionMetadata& meta, float scale, const FlexPrefillParams& params, Stream s = {});
void flexprefill_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                          const AttentionMetadata& meta, float scale, const FlexPrefillParams& params,
                          const DualChunkParams* dca, Stream s = {});

// AvgPool: per query head and query block of the chunk, softmax(block-mean query . block-mean key) over the causal key
// blocks; the blocks (sink and diagonal first, then by decreasing score) covering `threshold` of it. The chunk's last
// query block is scored by its last query: per key block the log-sum-exp of scale x q . k over the block's keys (the
// softmax over blocks is then that query's exact attention share; the token sampled after a prompt reads that row).
void avgpool_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                      const AttentionMetadata& meta, float scale, const AvgPoolParams& params, Stream s = {});
void avgpool_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                      const AttentionMetadata& meta, float scale, const AvgPoolParams& params,
                      const DualChunkParams* dca, Stream s = {});

}  // namespace nanovllm::ops
