// A sparse decode policy: per decode query and KV head, which pages of its context it attends, within a budget
// of whole pages that always holds the sink page and the recent window. A page is one KV cache block.
//
// Policies decide and compute, never move memory. The resident path calls attend() (the AttentionPolicy hook,
// after the step's K/V are in the cache); the offload path drives the three steps itself, moving the selected
// pages into its layer buffer between select() and attend_selected() (offload/offload_sparse_attention.h). A
// subclass says how pages are summarised (update_pages) and chosen (select); the attention over the chosen pages
// is the same for every policy. Register it in decode_policies() (sparse/policies.h).
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/model/attention_policy.h"
#include "nanovllm/model/decoder.h"

namespace nanovllm {

// The paged KV cache a decode policy serves.
struct PagedKvShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;          // NB of the paged cache
  int64_t block_size = 0;          // BS: tokens per block = per page
  int64_t num_kv_heads = 0;        // Hk
  int64_t num_query_heads = 0;     // Hq
  int64_t head_dim = 0;            // D
  DType kv_dtype = DType::kF32;    // the activations': any page metadata's, and the cache's unless it is fp8
  int64_t max_num_seqs = 0;        // sequences of one decode step
  int64_t max_blocks_per_seq = 0;  // MB: block-table columns
};

struct SparseDecodeCounters {
  int64_t sparse_layer_steps = 0;  // (layer, step) pairs attended sparsely
  int64_t dense_layer_steps = 0;   // ... densely (prefill or mixed steps)
  int64_t attended_keys = 0;       // keys the sparse steps read, summed over sequences, KV heads, layers (CPU only)
  int64_t context_keys = 0;        // ... keys dense attention would have read for the same (CPU only)
};

class SparseDecodePolicy : public AttentionPolicy {
 public:
  // The resident path: update_pages on every step; whole decode steps attend their selection, others are left to
  // dense attention (returns false).
  bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
              float scale, ops::Stream s) final;
  // The same with Dual Chunk Attention: q [3, T, Hq, D]; pages are scored with score_pages_dual_chunk and the
  // selection attended with each key's region's rotation (docs/sparse_attention.md, "With Dual Chunk Attention").
  bool attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                         const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale,
                         ops::Stream s) final;

  // Folds the keys just stored at slot_mapping into the layer's page summaries (if the policy keeps any).
  virtual void update_pages(int64_t layer, const KvCacheTensor& k_cache, TensorView slot_mapping, ops::Stream s) = 0;
  // The pages of a decode step (every query one token) as [S, Hk, budget_pages] i32 lists in increasing order,
  // -1 padded (valid until the next select); counted. dca: a Dual Chunk Attention step, q [3, S, Hq, D].
  TensorView select(int64_t layer, TensorView q, const AttentionMetadata& meta, ops::Stream s,
                    const ops::DualChunkParams* dca = nullptr);
  // Attends the selected pages (kv as update_pages saw it) with the exact softmax over their keys (with dca, each
  // key scored with its region's rotation of q [3, S, Hq, D]).
  void attend_selected(TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
                       TensorView selected, float scale, ops::Stream s, const ops::DualChunkParams* dca = nullptr);
  void count_dense_step() { ++counters_.dense_layer_steps; }

  int64_t budget_pages() const { return budget_pages_; }
  const PagedKvShape& shape() const { return shape_; }
  const SparseDecodeCounters& counters() const { return counters_; }
  // Device bytes of the selection and attention workspace for `shape` (what the base allocates).
  static int64_t workspace_bytes(const PagedKvShape& shape, int64_t budget_pages);

 protected:
  // budget_pages > sink_pages + recent_pages >= 1 (see ops::select_pages). Allocates the selection and attention
  // workspace from `alloc` (the cache's device).
  SparseDecodePolicy(const PagedKvShape& shape, int64_t budget_pages, int64_t sink_pages, int64_t recent_pages,
                     Allocator& alloc);
  // Scores [S, Hk, MB] f32 of the step's pages (any scale; the highest are kept beside the sink and recent pages).
  virtual void score_pages(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                           ops::Stream s) = 0;
  // The same for a Dual Chunk Attention step: q [3, S, Hq, D], each page scored with the rotation of its chunk
  // relation to the query. A policy without it refuses DCA models.
  virtual void score_pages_dual_chunk(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                                      const ops::DualChunkParams& dca, ops::Stream s);

  PagedKvShape shape_;
  int64_t budget_pages_, sink_pages_, recent_pages_;

 private:
  bool attend_step(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
                   float scale, ops::Stream s, const ops::DualChunkParams* dca);
  void count_selection(TensorView selected, const AttentionMetadata& meta);

  Buffer scores_;             // [max_num_seqs, Hk, MB] f32
  Buffer selected_;           // [max_num_seqs, Hk, budget_pages] i32
  Buffer attention_scratch_;  // sparse_decode_scratch_ints(max_num_seqs, Hk, budget_pages, BS) i32
  SparseDecodeCounters counters_;
};

}  // namespace nanovllm
