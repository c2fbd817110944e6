// The CPU reference runner: fp32 activations and KV cache, weights in their checkpoint dtype. One rank of a
// tensor-parallel group (TensorParallelRunner) is one of these, built from the rank's weight shard.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/engine/sampler.h"
#include "nanovllm/model/decoder.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/runner/model_runner.h"
#include "nanovllm/runner/sparse_attention.h"

namespace nanovllm {

class CpuModelRunner final : public ModelRunner {
 public:
  CpuModelRunner(const EngineConfig& ec, const ModelConfig& config);
  // Rank tp.plan.rank of a tensor-parallel group: `config` the full model's, `weights` the rank's shard
  // (load_weights with WeightLoadOptions::shard). Only rank 0 samples; the other ranks' execute() returns no tokens.
  CpuModelRunner(const EngineConfig& ec, const ModelConfig& config, ModelWeights weights, TensorParallelRank tp);

  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  std::vector<SampledToken> execute(const SchedulerOutput& out) override;

 protected:
  OffloadRunner* offload_runner() override { return offload_.get(); }
  const SparseDecodePolicy* decode_policy() const override { return sparse_->decode(); }
  const SparsePrefillAttention* prefill_policy() const override { return sparse_->prefill(); }

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
  std::unique_ptr<OffloadRunner> offload_;          // EngineConfig::offload.enabled
  std::unique_ptr<RunnerSparseAttention> sparse_;  // the paged cache's sparse policies
};

}  // namespace nanovllm
