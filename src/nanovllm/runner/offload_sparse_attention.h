// Sparse decode over the layer-wise offload ring (issue #30): the Quest policy (sparse/) chooses, per KV
// head, the pages of the context a decode query attends; this runner-side class moves them, because
// policies never move memory. For each layer of a decode step, inside Qwen3Model::layer once the new
// token's K/V is in the layer buffer:
//   1. the new key folds into the layer's page min/max (kept on the GPU for the whole context);
//   2. Quest scores the pages and selects the budget (sink, recent window, best pages);
//   3. page_cache_plan / page_cache_fetch put every selected page that lies in the host pool into the layer
//      buffer at its positions: from the GPU hot-page cache when it holds the page (a hit), otherwise over
//      PCIe from the pinned host pool, caching it (a miss);
//   4. sparse_decode_attention reads the selected pages of the layer buffer; the recent tokens past the
//      host pool are there already (the runner copies the decode buffer in before the layer).
// Nothing waits for the host inside a step: selection, plan and copies are device work on the compute
// stream. Prefill chunks only update the page metadata and attend densely.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/page_cache_ops.h"
#include "nanovllm/model/attention_policy.h"
#include "nanovllm/runner/offload_host_pool.h"
#include "nanovllm/sparse/quest_attention.h"

namespace nanovllm {

struct PageCacheCounters {
  int64_t hits = 0, misses = 0;  // cacheable selected pages (layer, KV head, page) since construction
};

class OffloadSparseAttention final : public AttentionPolicy {
 public:
  // shape: the Quest metadata over a layer buffer of shape.num_blocks pages of shape.block_size tokens
  // (one sequence). cache_tokens: per layer and KV head (0: no cache, else >= the budget). iota: device
  // [>= num_blocks] i32 0, 1, 2, ... (the layer buffer's identity page table). host: the offloaded
  // sequence's pool (read through its pinned pointers).
  OffloadSparseAttention(const QuestShape& shape, int64_t budget_pages, int64_t sink_pages, int64_t recent_pages,
                         int64_t cache_tokens, TensorView iota, const OffloadHostPool& host, Allocator& alloc);

  // A new sequence: the cache forgets every page (its metadata is rewritten by the prefill).
  void begin_sequence(ops::Stream s);
  // A decode step whose host pool holds the sequence's first host_tokens tokens.
  void begin_step(int64_t host_tokens);

  bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
              float scale, ops::Stream s) override;

  // The device counters (waits for the stream's work first).
  PageCacheCounters cache_counters(ops::Stream s) const;
  const QuestCounters& quest_counters() const { return quest_.counters(); }
  size_t device_bytes() const;

 private:
  LayerKvCache paged(const LayerKvCache& kv) const;  // the layer buffer as [pages, page_size, Hk, D]

  QuestAttention quest_;
  QuestShape shape_;
  int64_t budget_pages_ = 0, cache_slots_ = 0;
  TensorView iota_;
  const OffloadHostPool& host_;
  Buffer cache_;                 // [L x 2, C, page_size, Hk, D]: the hot pages' K and V per layer
  Buffer state_;                 // [L, Hk x (P + 2 C + 1)] i32: page_slot, slot_page, slot_stamp, hand
  Buffer plan_;                  // [1, Hk, budget_pages, 2] i32
  Buffer counters_;              // [2] i64: hits, misses
  std::vector<ops::PageCacheState> states_;  // [L] views of state_
  int64_t host_tokens_ = 0;
  int32_t step_ = 0;
};

}  // namespace nanovllm
