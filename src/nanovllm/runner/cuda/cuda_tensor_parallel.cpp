#include "nanovllm/runner/cuda/cuda_tensor_parallel.h"

#include <algorithm>
#include <chrono>

#include "nanovllm/core/logging.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/runner/cuda/cuda_model_runner.h"
#include "nanovllm/runner/cuda/nccl_communicator.h"
#include "nanovllm/runner/tensor_parallel_runner.h"

namespace nanovllm {
namespace {

// A GPU step (or a rank's construction: reading its shard, capturing its graphs) taking longer than this
// is a stuck group (docs/tensor_parallel.md, "the deadlock to avoid"): abort NCCL and fail, not hang.
constexpr std::chrono::milliseconds kStepTimeout{300'000};

// Bf16 all-reduces up to this size take the one-shot peer-memory kernel (each rank reads the N - 1 peers'
// messages over NVLink); larger ones (prefill chunks) NCCL's ring. 8 MiB of peer reads per rank covers
// decode batches up to 1024 x 4096 on two GPUs; the crossover was measured on 2 x H200
// (bench/results/2026-11-26/s28/README.md).
size_t peer_all_reduce_bytes(int size) { return (size_t{8} << 20) / static_cast<size_t>(std::max(size - 1, 1)); }

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_tensor_parallel_runner(const EngineConfig& config,
                                                              const ModelConfig& model_config) {
  const int size = static_cast<int>(config.parallel.tensor_parallel_size);
  validate_tensor_parallel(model_config, size);
  auto group = std::make_shared<NcclGroup>(size, peer_all_reduce_bytes(size));  // checks the GPU count first
  NANOVLLM_INFO("tensor parallel: ", size, " ranks on GPUs 0-", size - 1);
  return std::make_unique<TensorParallelRunner>(
      size,
      [&](int r) -> std::unique_ptr<ModelRunner> {  // on rank r's thread: it reads its own slices
        return std::make_unique<CudaModelRunner>(config, model_config,
                                                 TensorParallelRank{shard_for_rank(model_config, r, size), group->rank(r)});
      },
      [group] { group->abort(); }, group, /*ranks_launch=*/true,
      [](ModelRunner& rank) { static_cast<CudaModelRunner&>(rank).start_tensor_parallel(); },
      kStepTimeout);
}

}  // namespace nanovllm
