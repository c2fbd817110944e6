// Quest sparse decode attention (Tang et al. 2024, per head): for every KV block and KV head the element-wise min
// and max of its keys; a decode query scores each page of its context with the upper bound
// sum_d max(q_d min_d, q_d max_d), takes the max over its GQA group's query heads (never an average over heads: one
// head's page must not be lost to the others'), and attends only the best pages within the budget, plus the sink
// page and the recent window.
//
// The metadata lives beside the paged cache (one min/max pair per block, indexed by physical block id, so
// prefix-cached blocks keep theirs) and is updated from the slot mapping after every step's K/V store, prefill and
// decode alike.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/sparse/decode_policy.h"

namespace nanovllm {

class QuestAttention final : public SparseDecodePolicy {
 public:
  // Allocates the metadata (2 x [NB, Hk, D] per layer) from `alloc` (the cache's device).
  QuestAttention(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc);

  void update_pages(int64_t layer, const KvCacheTensor& k_cache, TensorView slot_mapping, ops::Stream s) override;
  TensorView key_min(int64_t layer) const { return key_min_[static_cast<size_t>(layer)]; }  // [NB, Hk, D]
  TensorView key_max(int64_t layer) const { return key_max_[static_cast<size_t>(layer)]; }  // [NB, Hk, D]
  static int64_t metadata_bytes_per_block(const PagedKvShape& shape);

 private:
  void score_pages(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                   ops::Stream s) override;
  // With DCA a page's bound takes the rotation of each chunk relation it meets (ops::quest_scores' DCA overload).
  void score_pages_dual_chunk(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                              const ops::DualChunkParams& dca, ops::Stream s) override;

  Buffer metadata_;                            // [L, 2, NB, Hk, D] kv_dtype
  std::vector<TensorView> key_min_, key_max_;  // [L] views of [NB, Hk, D]
};

}  // namespace nanovllm
