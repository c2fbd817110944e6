#include "nanovllm/runner/cuda/cuda_tensor_parallel.h"

#include <chrono>

#include "nanovllm/core/logging.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/weights.h"
#include "nanovllm/runner/cuda/cuda_model_runner.h"
#include "nanovllm/runner/cuda/nccl_communicator.h"
#include "nanovllm/runner/tensor_parallel_runner.h"

namespace nanovllm {
namespace {

// A GPU step (or a rank's construction: reading its shard, capturing its graphs) taking longer than this
// is a stuck group (docs/tensor_parallel.md, "the deadlock to avoid"): abort NCCL and fail, not hang.
constexpr std::chrono::milliseconds kStepTimeout{300'000};

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_tensor_parallel_runner(const EngineConfig& config,
                                                              const ModelConfig& model_config) {
  const int size = static_cast<int>(config.parallel.tensor_parallel_size);
  validate_tensor_parallel(model_config, size);
  auto group = std::make_shared<NcclGroup>(size);  // checks the GPU count first
  // The checkpoint is read once, into host memory in bf16; each rank uploads its slices of it.
  // (Next: each rank reading only its slices from the mapped files, docs/tensor_parallel.md section 9.)
  const auto t0 = std::chrono::steady_clock::now();
  WeightLoadOptions opt;
  opt.dtype = DType::kBF16;
  const ModelWeights host = load_weights(config.model.path, model_config, opt);
  NANOVLLM_INFO("tensor parallel: read the checkpoint in ",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s; ", size,
                " ranks on GPUs 0-", size - 1);
  return std::make_unique<TensorParallelRunner>(
      size,
      [&](int r) -> std::unique_ptr<ModelRunner> {
        return std::make_unique<CudaModelRunner>(config, model_config, host,
                                                 TensorParallelRank{shard_for_rank(model_config, r, size), group->rank(r)});
      },
      [group] { group->abort(); }, group, /*ranks_launch=*/true,
      [](ModelRunner& rank) { static_cast<CudaModelRunner&>(rank).start_tensor_parallel(); },
      kStepTimeout);
}

}  // namespace nanovllm
