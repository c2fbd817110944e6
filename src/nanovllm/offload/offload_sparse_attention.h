// Sparse decode over the layer-wise offload ring: the decode policy (sparse/decode_policy.h: Quest or any other
// registered one) chooses, per KV head, the pages of the context a decode query attends; this class moves them,
// because policies never move memory. A decode step may batch several offloaded sequences, each in its own lane
// of the layer buffer. For each layer of a decode step, inside Decoder::layer once the new tokens'
// K/V are in the layer buffer:
//   1. the new key folds into the layer's page summaries (Quest: min/max, kept on the GPU for the whole context);
//   2. the policy scores the pages and selects the budget (sink, recent window, best pages);
//   3. per sequence, page_cache_plan / page_cache_fetch put every selected page that lies in its host pool
//      into its lane of the layer buffer at its positions: from the lane's GPU hot-page cache when it holds
//      the page (a hit), otherwise over PCIe from the pinned host pool, caching it (a miss);
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
#include "nanovllm/offload/offload_host_pool.h"
#include <memory>

#include "nanovllm/sparse/decode_policy.h"

namespace nanovllm {

struct PageCacheCounters {
  int64_t hits = 0, misses = 0;  // cacheable selected pages (lane, layer, KV head, page) since construction
};

// One row of a batched offloaded decode step: the sequence's lane (its region of the layer buffer, its host
// pool, its hot-page cache) and how many of its tokens the host pool holds: the page cache ops' row, passed to them
// as it is.
using OffloadDecodeRow = ops::PageCacheRow;

class OffloadSparseAttention final : public AttentionPolicy {
 public:
  // `policy` serves the layer buffer: `hosts.size()` lanes of pages_per_lane pages of shape.block_size tokens
  // each, lane after lane: shape.num_blocks = lanes x pages_per_lane, shape.max_num_seqs = lanes,
  // shape.max_blocks_per_seq = pages_per_lane. cache_tokens: per lane, layer and KV head (0: no cache, else >= the
  // budget). hosts: each lane's pool (read through its pinned pointers; they outlive this; fp8: with scales_by_head). kv_dtype: the KV
  // cache's elements (kernels/kv_cache.h; fp8: the pools, the layer buffer and the hot-page cache hold codes and
  // scales). The counters start at 0 on stream s.
  OffloadSparseAttention(std::unique_ptr<SparseDecodePolicy> policy, int64_t cache_tokens,
                         std::vector<const OffloadHostPool*> hosts, DType kv_dtype, Allocator& alloc, ops::Stream s);

  // A new sequence's prompt in `lane`: the lane's cache forgets every page; the prefill chunks that follow
  // write its page metadata and attend densely.
  void begin_prefill(int64_t lane, ops::Stream s);
  // A decode step of rows.size() sequences, in the step's row order. page_tables [B, >= pages of the longest]
  // i32 device: row b lists lane rows[b].lane's pages of the layer buffer, in order (valid for the step).
  void begin_decode(std::vector<OffloadDecodeRow> rows, TensorView page_tables);

  bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
              float scale, ops::Stream s) override;
  // Dual Chunk Attention: the same steps with q [3, T, Hq, D] (the policy scores and attends with each key's
  // region's rotation; the pages moved are the selection's, as without DCA).
  bool attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                         const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale,
                         ops::Stream s) override;

  // The device counters (waits for the stream's work first).
  PageCacheCounters cache_counters(ops::Stream s) const;
  const SparseDecodePolicy& policy() const { return *policy_; }
  // The hot-page cache's and the plans' device bytes (the policy's own are sparse_decode_bytes').
  size_t device_bytes() const;

 private:
  bool attend_step(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
                   float scale, ops::Stream s, const ops::DualChunkParams* dca);
  // Lane `lane`'s state of `layer`: a slice of layer_states_[layer].
  ops::PageCacheState lane_state(int64_t lane, int64_t layer) const;
  // The hot-page cache of `layer`, K or V: [lanes, C, page_size, Hk, D] and its scales.
  KvCacheTensor layer_cache(int64_t layer, bool value) const;

  std::unique_ptr<SparseDecodePolicy> policy_;
  PagedKvShape shape_;
  int64_t budget_pages_ = 0, cache_slots_ = 0, pages_per_lane_ = 0;
  std::vector<const OffloadHostPool*> hosts_;  // [lanes]
  DType kv_dtype_;
  Buffer cache_;                 // [L, 2, lanes, C, page_size, Hk, D]: the hot pages' K and V
  Buffer cache_scale_;           // [L, 2, lanes, C, page_size, Hk] f32: their scales (fp8 only)
  // Per layer: page_slot [lanes, Hk, P], slot_page [lanes, Hk, C], slot_stamp [lanes, Hk, C], hand [lanes, Hk] i32
  // (each layer's lanes stacked, so one plan launch serves every row of a step).
  Buffer state_;
  Buffer plan_;                  // [lanes, Hk, budget_pages, 2] i32: one plan per decode row
  Buffer counters_;              // [2] i64: hits, misses
  std::vector<ops::PageCacheState> layer_states_;  // [L] views of state_, the lanes stacked
  std::vector<OffloadDecodeRow> rows_;             // the decode step's; empty while a prefill runs
  std::vector<KvCacheTensor> host_k_, host_v_;     // per row: its lane's host pool of the current layer
  TensorView page_tables_;
  int32_t step_ = 0;
};

}  // namespace nanovllm
