#include "nanovllm/runner/cuda/cuda_tensor_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "nanovllm/core/logging.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/runner/cuda/cuda_model_runner.h"
#include "nanovllm/parallel/cuda/nccl_communicator.h"
#include "nanovllm/parallel/rendezvous.h"

namespace nanovllm {
namespace {

// A GPU step (or a rank's construction: reading its shard, capturing its graphs) taking longer than this
// is a stuck group (docs/tensor_parallel.md, "the deadlock to avoid"): abort NCCL and fail, not hang.
constexpr std::chrono::milliseconds kStepTimeout{300'000};

// Bf16 all-reduces up to this size take the one-shot peer-memory kernel (each rank reads the N - 1 peers'
// messages over NVLink); larger ones (prefill chunks) NCCL's ring. 8 MiB of peer reads per rank covers
// decode batches up to 1024 x 4096 on two GPUs. Measured on 2 x H200 (bench/README.md, 2 x H200 table, "peer
// all-reduce vs NCCL"; docs/tensor_parallel.md, section 6): 36.5 vs NCCL's 46.2 us at 8 MiB, 69.6 vs
// 75.3 at 16 MiB, NCCL faster from 32 MiB.
size_t peer_all_reduce_bytes(int size) { return (size_t{8} << 20) / static_cast<size_t>(std::max(size - 1, 1)); }

}  // namespace

std::unique_ptr<TensorParallelRunner> make_cuda_tensor_parallel_runner(const EngineConfig& config,
                                                                       const ModelConfig& model_config,
                                                                       const std::string* node0_payload) {
  const ParallelConfig& p = config.parallel;
  const int size = static_cast<int>(p.tensor_parallel_size), local = static_cast<int>(p.ranks_per_node());
  const int first = static_cast<int>(p.first_rank());
  validate_tensor_parallel(model_config, size);
  std::shared_ptr<NcclGroup> group;
  std::vector<Socket> remote_nodes;
  if (p.nnodes == 1) {
    group = std::make_shared<NcclGroup>(size, peer_all_reduce_bytes(size));  // checks the GPU count first
    NANOVLLM_INFO("tensor parallel: ", size, " ranks on GPUs 0-", size - 1);
  } else {
    ncclUniqueId id{};
    if (p.node_rank == 0) {
      NCCL_CHECK(ncclGetUniqueId(&id));
      HostedRendezvous rv = host_rendezvous(p, group_fingerprint(config, model_config), /*with_comm_ranks=*/false,
                                            std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
      remote_nodes = std::move(rv.nodes);
    } else {
      NANOVLLM_CHECK(node0_payload != nullptr && node0_payload->size() == sizeof(id),
                     "tensor parallel: node ", p.node_rank, " needs node 0's NCCL id (", sizeof(id), " bytes)");
      std::memcpy(&id, node0_payload->data(), sizeof(id));
    }
    group = std::make_shared<NcclGroup>(local, size, first, id);
    NANOVLLM_INFO("tensor parallel: ranks ", first, "-", first + local - 1, " of ", size, " on GPUs 0-", local - 1,
                  " (node ", p.node_rank, " of ", p.nnodes, ")");
  }
  auto abort = [group] { group->abort(); };
  auto runner = std::make_unique<TensorParallelRunner>(
      local,
      [&](int r) -> std::unique_ptr<ModelRunner> {  // on rank r's thread: it reads its own slices
        return std::make_unique<CudaModelRunner>(
            config, model_config, TensorParallelRank{shard_for_rank(model_config, first + r, size), group->rank(r)}, r);
      },
      abort, group, /*ranks_launch=*/true,
      [](ModelRunner& rank) { static_cast<CudaModelRunner&>(rank).start_tensor_parallel(); },
      kStepTimeout);
  if (!remote_nodes.empty()) runner->attach_remote_nodes(std::make_unique<RemoteNodes>(std::move(remote_nodes), abort));
  return runner;
}

}  // namespace nanovllm
