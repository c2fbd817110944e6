#include "nanovllm/sparse/quest_attention.h"

#include "nanovllm/kernels/sparse_ops.h"
#include "nanovllm/sparse/sparse_config.h"

namespace nanovllm {

QuestAttention::QuestAttention(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc)
    : SparseDecodePolicy(shape, budget_pages, SparseConfig::kSinkPages, SparseConfig::kRecentPages, alloc) {
  const int64_t L = shape.num_layers, NB = shape.num_blocks, Hk = shape.num_kv_heads, D = shape.head_dim;
  metadata_ = Buffer(alloc, shape.kv_dtype, Shape{L, 2, NB, Hk, D});
  const size_t half = static_cast<size_t>(NB * Hk * D) * dtype_size(shape.kv_dtype);
  for (int64_t l = 0; l < L; ++l) {
    char* base = static_cast<char*>(metadata_.data()) + static_cast<size_t>(2 * l) * half;
    key_min_.emplace_back(base, shape.kv_dtype, Shape{NB, Hk, D}, alloc.device());
    key_max_.emplace_back(base + half, shape.kv_dtype, Shape{NB, Hk, D}, alloc.device());
  }
}

int64_t QuestAttention::metadata_bytes_per_block(const PagedKvShape& shape) {
  return shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim * static_cast<int64_t>(dtype_size(shape.kv_dtype));
}

void QuestAttention::update_pages(int64_t layer, const KvCacheTensor& k_cache, TensorView slot_mapping,
                                  ops::Stream s) {
  ops::quest_update_pages(key_min(layer), key_max(layer), k_cache, slot_mapping, s);
}

void QuestAttention::score_pages(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                                 ops::Stream s) {
  ops::quest_scores(scores, q, key_min(layer), key_max(layer), meta.block_tables, meta.context_lens,
                    shape_.block_size, s);
}

void QuestAttention::score_pages_dual_chunk(TensorView scores, int64_t layer, TensorView q,
                                            const AttentionMetadata& meta, const ops::DualChunkParams& dca,
                                            ops::Stream s) {
  ops::quest_scores(scores, q, key_min(layer), key_max(layer), meta.block_tables, meta.context_lens,
                    shape_.block_size, &dca, s);
}

}  // namespace nanovllm
