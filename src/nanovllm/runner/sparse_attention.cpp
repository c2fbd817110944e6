#include "nanovllm/runner/sparse_attention.h"

#include <vector>

namespace nanovllm {

PagedKvShape paged_kv_shape(const EngineConfig& config, const ModelConfig& model, int64_t num_kv_blocks,
                            DType kv_dtype) {
  return {.num_layers = model.num_hidden_layers,
          .num_blocks = num_kv_blocks,
          .block_size = config.cache.block_size,
          .num_kv_heads = model.num_key_value_heads,
          .num_query_heads = model.num_attention_heads,
          .head_dim = model.head_dim,
          .kv_dtype = kv_dtype,
          .max_num_seqs = config.scheduler.max_num_seqs,
          .max_blocks_per_seq = config.blocks_per_max_len_seq() + 1};
}

RunnerSparseAttention::RunnerSparseAttention(const EngineConfig& config, const ModelConfig& model, Allocator& alloc)
    : config_(config),
      model_(model),
      alloc_(alloc),
      prefill_(make_sparse_prefill_policy(config.sparse_prefill, model.num_attention_heads, model.num_key_value_heads,
                                          alloc)) {}

void RunnerSparseAttention::make_decode_policy(int64_t num_kv_blocks, DType kv_dtype) {
  decode_ = make_sparse_decode_policy(config_.sparse, paged_kv_shape(config_, model_, num_kv_blocks, kv_dtype), alloc_);
  if (decode_ && prefill_)
    chain_ = std::make_unique<AttentionPolicyChain>(std::vector<AttentionPolicy*>{decode_.get(), prefill_.get()});
}

SparseDecodeBytes RunnerSparseAttention::decode_bytes(const EngineConfig& config, const ModelConfig& model,
                                                      DType kv_dtype) {
  return sparse_decode_bytes(config.sparse, paged_kv_shape(config, model, 0, kv_dtype));
}

AttentionPolicy* RunnerSparseAttention::all_steps() const {
  if (chain_) return chain_.get();
  return decode_ ? static_cast<AttentionPolicy*>(decode_.get()) : prefill_.get();
}

}  // namespace nanovllm
