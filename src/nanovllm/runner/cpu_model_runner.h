// The CPU reference runner: fp32 activations and KV cache, weights in their checkpoint dtype. One rank of a
// tensor-parallel group (TensorParallelRunner) is one of these, built from the rank's weight shard.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/engine/sampler.h"
#include "nanovllm/model/decoder.h"
#include "nanovllm/runner/model_runner.h"
#include "nanovllm/runner/offload_runner.h"
#include "nanovllm/sparse/attention_policy_chain.h"
#include "nanovllm/sparse/quest_attention.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"

namespace nanovllm {

class CpuModelRunner final : public ModelRunner {
 public:
  CpuModelRunner(const EngineConfig& ec, const ModelConfig& config);
  // Rank tp.plan.rank of a tensor-parallel group: `config` the full model's, `weights` the rank's shard
  // (load_weights with WeightLoadOptions::shard). Only rank 0 samples; the other ranks' execute() returns no tokens.
  CpuModelRunner(const EngineConfig& ec, const ModelConfig& config, ModelWeights weights, TensorParallelRank tp);

  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  std::vector<SampledToken> execute(const SchedulerOutput& out) override;
  OffloadRunner* offload() override { return offload_.get(); }
  const QuestCounters* sparse_counters() const override { return quest_ ? &quest_->counters() : nullptr; }
  const SparsePrefillCounters* sparse_prefill_counters() const override {
    return sparse_prefill_ ? &sparse_prefill_->counters() : nullptr;
  }

 private:
  EngineConfig ec_;
  std::vector<float> rope_inv_freq_;  // [D/2]
  std::unique_ptr<Decoder> model_;
  int64_t num_kv_blocks_ = 0;
  Buffer kv_storage_;                 // [L, 2, NB, BS, Hk, D] f32
  std::vector<LayerKvCache> kv_;
  Buffer workspace_storage_;
  DecoderWorkspace ws_;
  Sampler sampler_;
  bool samples_ = true;  // false on tensor-parallel ranks other than 0
  std::unique_ptr<OffloadRunner> offload_;  // EngineConfig::offload.enabled
  std::unique_ptr<QuestAttention> quest_;   // EngineConfig::sparse.policy == quest
  std::unique_ptr<SparsePrefillAttention> sparse_prefill_;  // EngineConfig::sparse_prefill.policy != dense
  std::unique_ptr<AttentionPolicyChain> policies_;          // both of them
  AttentionPolicy* attention_policy_ = nullptr;             // what the model's steps use (nullptr: dense)
};

}  // namespace nanovllm
