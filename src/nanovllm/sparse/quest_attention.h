// Quest sparse decode attention (Tang et al. 2024, per head): for every KV block and KV head the
// element-wise min and max of its keys; a decode query scores each page of its context with the upper
// bound sum_d max(q_d min_d, q_d max_d), takes the max over its GQA group's query heads (never an
// average over heads: one head's page must not be lost to the others'), and attends only the best pages
// within the budget, plus the sink page and the recent window. A page is one KV block.
//
// Decides and computes, never moves memory: the metadata lives beside the paged cache (one min/max
// pair per block, indexed by physical block id, so prefix-cached blocks keep theirs) and is updated from
// the slot mapping after every step's K/V store, prefill and decode alike.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/model/attention_policy.h"
#include "nanovllm/model/decoder.h"

namespace nanovllm {

struct QuestShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;          // NB of the paged cache
  int64_t block_size = 0;          // BS: tokens per block = per page
  int64_t num_kv_heads = 0;        // Hk
  int64_t num_query_heads = 0;     // Hq
  int64_t head_dim = 0;            // D
  DType kv_dtype = DType::kF32;    // the cache's (and the metadata's) dtype
  int64_t max_num_seqs = 0;        // sequences of one decode step
  int64_t max_blocks_per_seq = 0;  // MB: block-table columns
};

struct QuestCounters {
  int64_t sparse_layer_steps = 0;  // (layer, step) pairs attended sparsely
  int64_t dense_layer_steps = 0;   // ... densely (prefill or mixed steps)
  int64_t attended_keys = 0;       // keys the sparse steps read, summed over sequences, KV heads, layers
  int64_t context_keys = 0;        // keys dense attention would have read for the same
};

class QuestAttention final : public AttentionPolicy {
 public:
  // budget_pages >= sink_pages + recent_pages + 1. Allocates the metadata (2 x [NB, Hk, D] per layer)
  // and the selection workspace from `alloc` (the cache's device).
  QuestAttention(const QuestShape& shape, int64_t budget_pages, int64_t sink_pages, int64_t recent_pages,
                 Allocator& alloc);

  bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
              float scale, ops::Stream s) override;

  // The steps of attend, for a runner that must move the selected pages before they are attended (the
  // offloaded decode): fold the keys just stored at slot_mapping into the layer's page metadata ...
  void update_pages(int64_t layer, TensorView k_cache, TensorView slot_mapping, ops::Stream s);
  // ... select the pages of a decode step (every query one token) into the returned [S, Hk, budget_pages]
  // view (select_pages' lists; valid until the next select), counting them ...
  TensorView select(int64_t layer, TensorView q, const AttentionMetadata& meta, ops::Stream s);
  // ... and attend them (kv as update_pages saw it).
  void attend_selected(TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
                       TensorView selected, float scale, ops::Stream s);
  void count_dense_step() { ++counters_.dense_layer_steps; }

  const QuestCounters& counters() const { return counters_; }
  TensorView key_min(int64_t layer) const { return key_min_[static_cast<size_t>(layer)]; }  // [NB, Hk, D]
  TensorView key_max(int64_t layer) const { return key_max_[static_cast<size_t>(layer)]; }  // [NB, Hk, D]

 private:
  QuestShape shape_;
  int64_t budget_pages_, sink_pages_, recent_pages_;
  Buffer metadata_;                       // [L, 2, NB, Hk, D] kv_dtype
  std::vector<TensorView> key_min_, key_max_;  // [L] views of [NB, Hk, D]
  Buffer scores_;                         // [max_num_seqs, Hk, MB] f32
  Buffer selected_;                       // [max_num_seqs, Hk, budget_pages] i32
  Buffer attention_scratch_;              // sparse_decode_scratch_ints(max_num_seqs, Hk, budget_pages, BS) i32
  QuestCounters counters_;

  void count_selection(TensorView selected, const AttentionMetadata& meta);
};

}  // namespace nanovllm
