// The CUDA backend's tensor-parallel group (docs/tensor_parallel.md): rank r on GPU r of this host, each a
// CudaModelRunner on its own thread, talking through NCCL.
#pragma once

#include <memory>

#include "nanovllm/runner/model_runner.h"

namespace nanovllm {

// config.parallel.tensor_parallel_size ranks. Throws when the host has fewer GPUs.
std::unique_ptr<ModelRunner> make_cuda_tensor_parallel_runner(const EngineConfig& config,
                                                              const ModelConfig& model_config);

}  // namespace nanovllm
