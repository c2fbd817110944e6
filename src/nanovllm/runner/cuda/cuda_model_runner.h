// The CUDA runner: bf16 weights and KV cache on one GPU, a dedicated compute stream, the step's
// inputs moved with one host->device copy, no allocation inside a step.
#pragma once

#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"
#include "nanovllm/engine/sampler.h"
#include "nanovllm/model/qwen3_model.h"
#include "nanovllm/runner/model_runner.h"

namespace nanovllm {

class CudaModelRunner final : public ModelRunner {
 public:
  CudaModelRunner(const std::filesystem::path& model_dir, const ModelConfig& config, const RunnerConfig& rc);
  ~CudaModelRunner() override;

  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  std::vector<SampledToken> execute(const SchedulerOutput& out) override;

 private:
  void load_model(const std::filesystem::path& model_dir, const ModelConfig& config);
  void allocate_kv_cache(const ModelConfig& config);

  RunnerConfig rc_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  Buffer rope_inv_freq_;             // [D/2] f32, device
  std::unique_ptr<Qwen3Model> model_;
  Buffer workspace_;                 // decoder activations, device
  DecoderWorkspace ws_;
  int64_t num_kv_blocks_ = 0;
  Buffer kv_storage_;                // [L, 2, NB, BS, Hk, D] bf16, device
  std::vector<LayerKvCache> kv_;
  int64_t max_batch_ints_ = 0;
  Buffer batch_host_;                // packed ForwardBatch ints, pinned
  Buffer batch_device_;              // its device copy
  Buffer logits_host_;               // [S, V] f32, pinned
  Sampler sampler_;
};

}  // namespace nanovllm
