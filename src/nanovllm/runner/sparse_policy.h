// The runners' sparse decode policy (EngineConfig::sparse) over their paged KV cache: one factory, so the
// CPU and CUDA runners size it alike, and the bytes it takes, so the CUDA runner can leave room for it
// when it sizes the KV cache from the memory budget.
#pragma once

#include <cstdint>
#include <memory>

#include "nanovllm/engine/config.h"
#include "nanovllm/model/config.h"
#include "nanovllm/sparse/quest_attention.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"

namespace nanovllm {

// nullptr when config.sparse.policy is full (dense attention needs no policy).
std::unique_ptr<QuestAttention> make_sparse_policy(const EngineConfig& config, const ModelConfig& model,
                                                   int64_t num_kv_blocks, DType kv_dtype, Allocator& alloc);

// The sparse prefill policy (EngineConfig::sparse_prefill) with its pattern buffer on `alloc`'s device; nullptr
// when the policy is dense.
std::unique_ptr<SparsePrefillAttention> make_sparse_prefill_policy(const EngineConfig& config,
                                                                   const ModelConfig& model, Allocator& alloc);

// Device bytes make_sparse_policy allocates: per_block x num_kv_blocks + fixed (0, 0 when dense).
struct SparsePolicyBytes {
  int64_t per_block = 0;  // page metadata: key min and max per layer, KV head, head_dim
  int64_t fixed = 0;      // selection workspace for max_num_seqs sequences
};
SparsePolicyBytes sparse_policy_bytes(const EngineConfig& config, const ModelConfig& model, DType kv_dtype);

}  // namespace nanovllm
