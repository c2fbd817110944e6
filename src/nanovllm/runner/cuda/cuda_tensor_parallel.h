// The CUDA backend's tensor-parallel group (docs/tensor_parallel.md): this host's ranks, local rank r on
// GPU r, each a CudaModelRunner on its own thread, talking through NCCL (and, on one host, the peer-memory
// all-reduce).
#pragma once

#include <memory>
#include <string>

#include "nanovllm/runner/tensor_parallel_runner.h"

namespace nanovllm {

// config.parallel.tensor_parallel_size ranks over config.parallel.nnodes hosts; this host runs
// tensor_parallel_size / nnodes of them. Node 0 makes the NCCL unique id and meets the other nodes at
// dist_init_addr (host_rendezvous) before building its ranks, then attaches them; a worker passes the id
// node 0 answered its hello with (`node0_payload`). Throws when the host has too few GPUs.
std::unique_ptr<TensorParallelRunner> make_cuda_tensor_parallel_runner(const EngineConfig& config,
                                                                       const ModelConfig& model_config,
                                                                       const std::string* node0_payload = nullptr);

}  // namespace nanovllm
