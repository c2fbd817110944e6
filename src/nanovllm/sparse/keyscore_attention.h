// Keyscore sparse decode attention: per KV head the pages whose keys score highest against the query, from a 4-bit
// copy of every key (docs/sparse_attention.md, "Keyscore"). Quest ranks a page by an upper bound from its keys'
// min/max, which at 64x compression is about as large for a page of unrelated keys as for the page holding the
// answer; keyscore computes each key's q . k from its 4-bit copy (ops::int4_keys_update) and ranks a page by its
// best key, the max over its GQA group's query heads as Quest does.
//
// The copy lives beside the paged cache (per physical block, so prefix-cached blocks keep theirs; per virtual page
// of the layer buffer with offload, where it stays on the GPU while the keys go to host memory): D / 2 + 4 bytes
// per key and KV head, 26% of a bf16 key (13% of the KV cache).
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/sparse/decode_policy.h"

namespace nanovllm {

class KeyScoreAttention final : public SparseDecodePolicy {
 public:
  // Allocates the copy ([NB, Hk, BS, D / 2] codes and [NB, Hk, BS] scales per layer) from `alloc`.
  KeyScoreAttention(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc);

  void update_pages(int64_t layer, const KvCacheTensor& k_cache, TensorView slot_mapping, ops::Stream s) override;
  static int64_t metadata_bytes_per_block(const PagedKvShape& shape);

 private:
  void score_pages(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                   ops::Stream s) override;

  Buffer codes_;                           // [L, NB, Hk, BS, D / 2] u8
  Buffer scales_;                          // [L, NB, Hk, BS] f32
  std::vector<TensorView> layer_codes_;    // [L] views of [NB, Hk, BS, D / 2]
  std::vector<TensorView> layer_scales_;   // [L] views of [NB, Hk, BS]
};

}  // namespace nanovllm
