// Sparse prefill attention: for a long prefill chunk of one sequence, an estimator (XAttention, MInference
// vertical-slash, FlexPrefill or AvgPool: kernels/pattern_estimators.h) picks per KV head and query block the key
// blocks (and columns) worth attending, and block_sparse_prefill_attention (kernels/sparse_ops.h) attends exactly
// those, with the exact softmax over them. Every prefill chunk of a step whose context reaches min_context goes sparse,
// whatever else the step holds: a step of several sequences (decodes and prefill chunks, as a busy scheduler packs
// them) is attended one sequence at a time, the chunks that qualify sparsely, the others (decodes, short chunks) by
// dense paged_attention. That needs each sequence's query length and context on the host (AttentionMetadata's host
// views, which ForwardBatch gives on both backends); without them only a one-sequence step can go sparse. Layers
// before first_sparse_layer and steps with no qualifying chunk are left to dense attention (attend returns false).
//
// With Dual Chunk Attention (attend_dual_chunk: q [3, T, Hq, D]) the same, with the estimators and the block-sparse
// kernel scoring each key with its region's query rotation, and dense dual_chunk_attention for what stays dense
// (docs/sparse_attention.md, "With Dual Chunk Attention").
//
// Decides and computes, never moves memory: the pattern lives in a buffer of the policy, grown to the longest
// context seen (on the cache's device); so does, for DCA steps of several sequences, a copy of one sequence's three
// query rotations (a sequence's rows of q [3, T, Hq, D] are three separate runs).
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/estimator_params.h"
#include "nanovllm/kernels/sparse_ops.h"
#include "nanovllm/model/attention_policy.h"
#include "nanovllm/model/decoder.h"

namespace nanovllm {

struct SparsePrefillOptions {
  enum class Estimator { kXAttention, kVerticalSlash, kFlexPrefill, kAvgPool };
  Estimator estimator = Estimator::kXAttention;
  int64_t block_size = 128;        // pattern block (tokens)
  int64_t first_sparse_layer = 0;  // layers [0, first_sparse_layer) stay dense
  int64_t min_context = 8192;      // chunks whose context (prefix + chunk) is shorter stay dense
  ops::XAttentionParams xattention;
  // Vertical-slash: vertical_slash.vertical / .slash of 0 are adaptive, from budget_share x context (the
  // seeds' minference_adaptive_budget): vertical = max(sinks + 1, 0.2 x budget), slash = max(recent + 1, 0.8 x ...).
  ops::VerticalSlashParams vertical_slash;
  double budget_share = 0.3;
  ops::FlexPrefillParams flexprefill;
  ops::AvgPoolParams avgpool;
  bool count_on_device = false;  // SparsePrefillCounters from a GPU pattern too (a stream sync per layer chunk)
};

// What the policy did, for tests and eval (density = attended_blocks / causal_blocks).
struct SparsePrefillCounters {
  int64_t sparse_layer_chunks = 0;  // (layer, chunk) pairs attended sparsely
  int64_t dense_layer_chunks = 0;   // (layer, step) pairs left to dense attention
  int64_t attended_blocks =
      0;                      // (KV head, query block, key block) triples listed, over the sparse chunks' query blocks
  int64_t causal_blocks = 0;  // ... that dense causal attention covers
  int64_t rows = 0;           // (KV head, query block) lists over the sparse chunks' query blocks
  int64_t attended_columns = 0;  // single key positions listed besides the blocks (vertical-slash)

  double density() const {  // 1 when no chunk went sparse
    return causal_blocks > 0 ? static_cast<double>(attended_blocks) / static_cast<double>(causal_blocks) : 1.0;
  }
  SparsePrefillCounters since(const SparsePrefillCounters& earlier) const {  // what happened after `earlier`
    return {sparse_layer_chunks - earlier.sparse_layer_chunks, dense_layer_chunks - earlier.dense_layer_chunks,
            attended_blocks - earlier.attended_blocks,         causal_blocks - earlier.causal_blocks,
            rows - earlier.rows,                               attended_columns - earlier.attended_columns};
  }
};

class SparsePrefillAttention final : public AttentionPolicy {
 public:
  // num_query_heads / num_kv_heads: the model's (GQA group sizes the column lists).
  SparsePrefillAttention(const SparsePrefillOptions& options, int64_t num_query_heads, int64_t num_kv_heads,
                         Allocator& alloc);

  bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
              float scale, ops::Stream s) override;
  bool attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                         const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale,
                         ops::Stream s) override;

  const SparsePrefillOptions& options() const { return options_; }
  const SparsePrefillCounters& counters() const { return counters_; }
  // The step's sequences that go sparse at `layer` (the rules above), increasing; empty: none.
  std::vector<int64_t> sparse_sequences(int64_t layer, const AttentionMetadata& meta) const;

 private:
  bool attend_step(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
                   float scale, ops::Stream s, const ops::DualChunkParams* dca);
  // Rows [begin, end) of the step's queries as one tensor: a slice of q [T, Hq, D], or with dca a copy of q [3, T, Hq,
  // D]'s rows into rows_ ([3, end - begin, Hq, D], valid until the next call).
  TensorView query_rows(TensorView q, int64_t begin, int64_t end, const ops::DualChunkParams* dca, ops::Stream s);
  ops::BlockSparsePattern pattern_for(int64_t ctx);  // views of pattern_ for a context, grown when needed
  ops::VerticalSlashParams vertical_slash_for(int64_t ctx) const;
  // One sequence's chunk (meta.num_seqs == 1): its pattern, the block-sparse attention, the counters.
  void attend_chunk(TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta, float scale,
                    ops::Stream s, const ops::DualChunkParams* dca);
  void estimate(const ops::BlockSparsePattern& pattern, TensorView q, const LayerKvCache& kv,
                const AttentionMetadata& meta, float scale, ops::Stream s, const ops::DualChunkParams* dca);
  void count(const ops::BlockSparsePattern& pattern, int64_t ctx, int64_t num_tokens, ops::Stream s);

  SparsePrefillOptions options_;
  int64_t num_query_heads_, num_kv_heads_;
  Allocator& alloc_;
  Buffer pattern_;  // [Hk, NQB] counts + [Hk, NQB, NQB] blocks + [Hk, NQB] + [Hk, NQB, MAXC] columns, i32
  int64_t pattern_ints_ = 0;
  Buffer rows_;  // query_rows' copy, grown
  int64_t rows_elements_ = 0;
  SparsePrefillCounters counters_;
  std::vector<int32_t> host_counts_;  // a GPU pattern's block and column counts, read back when counting
};

}  // namespace nanovllm
