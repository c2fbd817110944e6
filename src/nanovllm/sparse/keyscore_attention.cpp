#include "nanovllm/sparse/keyscore_attention.h"

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/sparse_ops.h"
#include "nanovllm/sparse/sparse_config.h"

namespace nanovllm {

KeyScoreAttention::KeyScoreAttention(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc)
    : SparseDecodePolicy(shape, budget_pages, SparseConfig::kSinkPages, SparseConfig::kRecentPages, alloc) {
  const int64_t L = shape.num_layers, NB = shape.num_blocks, Hk = shape.num_kv_heads, BS = shape.block_size;
  const int64_t D = shape.head_dim;
  NANOVLLM_CHECK(D % 32 == 0, "--sparse-policy keyscore needs a head_dim that is a multiple of 32, the model has ", D);
  codes_ = Buffer(alloc, DType::kU8, Shape{L, NB, Hk, BS, D / 2});
  scales_ = Buffer(alloc, DType::kF32, Shape{L, NB, Hk, BS});
  for (int64_t l = 0; l < L; ++l) {
    layer_codes_.emplace_back(codes_.view().data_as<uint8_t>() + l * NB * Hk * BS * (D / 2), DType::kU8,
                              Shape{NB, Hk, BS, D / 2}, alloc.device());
    layer_scales_.emplace_back(scales_.view().data_as<float>() + l * NB * Hk * BS, DType::kF32, Shape{NB, Hk, BS},
                               alloc.device());
  }
}

int64_t KeyScoreAttention::metadata_bytes_per_block(const PagedKvShape& shape) {
  return shape.num_layers * shape.num_kv_heads * shape.block_size * (shape.head_dim / 2 + 4);
}

void KeyScoreAttention::update_pages(int64_t layer, const KvCacheTensor& k_cache, TensorView slot_mapping,
                                     ops::Stream s) {
  const auto l = static_cast<size_t>(layer);
  ops::int4_keys_update(layer_codes_[l], layer_scales_[l], k_cache, slot_mapping, s);
}

void KeyScoreAttention::score_pages(TensorView scores, int64_t layer, TensorView q, const AttentionMetadata& meta,
                                    ops::Stream s) {
  const auto l = static_cast<size_t>(layer);
  ops::int4_key_scores(scores, q, layer_codes_[l], layer_scales_[l], meta.block_tables, meta.context_lens,
                       shape_.block_size, s);
}

}  // namespace nanovllm
