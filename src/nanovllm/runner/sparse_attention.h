// A runner's sparse attention over its paged KV cache (EngineConfig::sparse, ::sparse_prefill): the policies the
// registry (sparse/policies.h) makes for it, and what a step's layers call. The CPU and CUDA runners share it.
#pragma once

#include <cstdint>
#include <memory>

#include "nanovllm/engine/config.h"
#include "nanovllm/model/config.h"
#include "nanovllm/sparse/attention_policy_chain.h"
#include "nanovllm/sparse/policies.h"

namespace nanovllm {

// The paged cache of num_kv_blocks blocks a decode policy serves (model: the rank's config).
PagedKvShape paged_kv_shape(const EngineConfig& config, const ModelConfig& model, int64_t num_kv_blocks,
                            DType kv_dtype);

class RunnerSparseAttention {
 public:
  // The prefill policy now (its pattern buffer follows the context, not the cache); the decode policy once the
  // cache is sized (make_decode_policy). model: the rank's config.
  RunnerSparseAttention(const EngineConfig& config, const ModelConfig& model, Allocator& alloc);
  void make_decode_policy(int64_t num_kv_blocks, DType kv_dtype);
  // Device bytes the decode policy will take for a cache of n blocks: per_block x n + fixed.
  static SparseDecodeBytes decode_bytes(const EngineConfig& config, const ModelConfig& model, DType kv_dtype);

  SparseDecodePolicy* decode() const { return decode_.get(); }          // nullptr: dense decode
  SparsePrefillAttention* prefill() const { return prefill_.get(); }   // nullptr: dense prefill
  // Every step asks the decode policy first (it keeps its page metadata from every step), then the prefill
  // policy; nullptr when both are dense.
  AttentionPolicy* all_steps() const;
  // A step with a prefill asks both; a decode-only step only the decode policy (any policy turns off the CUDA
  // backend's fused decode attention, and the prefill policy never attends a decode).
  AttentionPolicy* for_step(bool has_prefill) const { return has_prefill ? all_steps() : decode_.get(); }

 private:
  EngineConfig config_;
  ModelConfig model_;
  Allocator& alloc_;
  std::unique_ptr<SparseDecodePolicy> decode_;
  std::unique_ptr<SparsePrefillAttention> prefill_;
  std::unique_ptr<AttentionPolicyChain> chain_;  // both of them
};

}  // namespace nanovllm
