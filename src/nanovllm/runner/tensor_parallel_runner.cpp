#include "nanovllm/runner/tensor_parallel_runner.h"

#include <algorithm>
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/weights.h"
#include "nanovllm/runner/cpu_model_runner.h"
#include "nanovllm/runner/weight_quantization.h"
#include "nanovllm/parallel/rendezvous.h"
#include "nanovllm/parallel/socket_communicator.h"
#include "nanovllm/parallel/thread_communicator.h"

namespace nanovllm {

TensorParallelRunner::TensorParallelRunner(int size,
                                           const std::function<std::unique_ptr<ModelRunner>(int rank)>& make_rank,
                                           std::function<void()> abort_group, std::shared_ptr<void> group_state,
                                           bool ranks_launch, const std::function<void(ModelRunner&)>& start_rank,
                                           std::chrono::milliseconds step_timeout)
    : group_state_(std::move(group_state)),
      ranks_(static_cast<size_t>(size)),
      ranks_launch_(ranks_launch),
      threads_(size, std::move(abort_group), step_timeout) {
  threads_.run([&](int r) { ranks_[static_cast<size_t>(r)] = make_rank(r); });
  if (start_rank) threads_.run([&](int r) { start_rank(*ranks_[static_cast<size_t>(r)]); });  // after all are built
}

void TensorParallelRunner::attach_remote_nodes(std::unique_ptr<RemoteNodes> nodes) {
  remote_ = std::move(nodes);
  remote_kv_blocks_ = remote_->wait_ready();
}

int64_t TensorParallelRunner::num_kv_blocks() const {
  int64_t blocks = ranks_[0]->num_kv_blocks();
  for (const auto& r : ranks_) blocks = std::min(blocks, r->num_kv_blocks());
  return remote_kv_blocks_ >= 0 ? std::min(blocks, remote_kv_blocks_) : blocks;
}

RunnerStats TensorParallelRunner::stats() {
  RunnerStats s = ranks_[0]->stats();
  s.num_kv_blocks = num_kv_blocks();
  return s;
}

std::vector<SampledToken> TensorParallelRunner::on_all_ranks(
    StepOp op, const SchedulerOutput* out, bool fed_from_previous,
    const std::function<std::vector<SampledToken>(ModelRunner&)>& fn) {
  NANOVLLM_CHECK(failed_.empty(), "the tensor-parallel group failed in an earlier step (", failed_,
                 "); it does not recover");
  NANOVLLM_CHECK(taps_ == nullptr, "layer taps with tensor_parallel_size > 1 are not supported");
  std::vector<SampledToken> tokens;
  try {
    if (remote_) remote_->send(op, out, fed_from_previous);  // the other nodes work alongside
    threads_.run([&](int r) {
      std::vector<SampledToken> t = fn(*ranks_[static_cast<size_t>(r)]);
      if (r == 0) tokens = std::move(t);
    });
    if (remote_) remote_->wait_answers();
  } catch (const std::exception& e) {
    failed_ = e.what();
    throw;
  }
  return tokens;
}

std::vector<SampledToken> TensorParallelRunner::execute(const SchedulerOutput& out) {
  return on_all_ranks(StepOp::kExecute, &out, false, [&](ModelRunner& r) { return r.execute(out); });
}

std::vector<SampledToken> TensorParallelRunner::execute_offloaded(const SchedulerOutput& out) {
  return on_all_ranks(StepOp::kExecuteOffloaded, &out, false,
                      [&](ModelRunner& r) { return r.execute_offloaded(out); });
}

// Every rank decides alike (same step, same configuration), so rank 0 answers for the group.
bool TensorParallelRunner::can_launch(const SchedulerOutput& out) const {
  return ranks_launch_ ? ranks_[0]->can_launch(out) : ModelRunner::can_launch(out);
}

void TensorParallelRunner::launch(const SchedulerOutput& out, bool fed_from_previous) {
  if (!ranks_launch_) return ModelRunner::launch(out, fed_from_previous);
  on_all_ranks(StepOp::kLaunch, &out, fed_from_previous, [&](ModelRunner& r) {
    r.launch(out, fed_from_previous);
    return std::vector<SampledToken>{};
  });
}

std::vector<SampledToken> TensorParallelRunner::wait_oldest() {
  if (!ranks_launch_) return ModelRunner::wait_oldest();
  return on_all_ranks(StepOp::kWaitOldest, nullptr, false, [](ModelRunner& r) { return r.wait_oldest(); });
}

namespace {

// This node's communicators when the group spans processes: every rank other than 0 has a socket to rank 0
// (local ranks of node 0 through socket pairs, the others through node 0's listener). Rank 0 lives on node 0.
std::vector<std::unique_ptr<SocketCommunicator>> connect_socket_ranks(const EngineConfig& config,
                                                                     const std::string& fingerprint,
                                                                     std::vector<Socket> remote_ranks) {
  const ParallelConfig& p = config.parallel;
  const int size = static_cast<int>(p.tensor_parallel_size), local = static_cast<int>(p.ranks_per_node());
  const int first = static_cast<int>(p.first_rank());
  std::vector<std::unique_ptr<SocketCommunicator>> comms;
  if (p.node_rank == 0) {
    std::vector<Socket> root_links, local_ends;
    for (int r = 1; r < local; ++r) {
      auto [root_end, rank_end] = Socket::pair("rank " + std::to_string(r), "rank 0");
      root_links.push_back(std::move(root_end));
      local_ends.push_back(std::move(rank_end));
    }
    for (Socket& s : remote_ranks) root_links.push_back(std::move(s));
    comms.push_back(std::make_unique<SocketCommunicator>(0, size, std::move(root_links)));
    for (int r = 1; r < local; ++r) {
      std::vector<Socket> link;
      link.push_back(std::move(local_ends[static_cast<size_t>(r - 1)]));
      comms.push_back(std::make_unique<SocketCommunicator>(r, size, std::move(link)));
    }
    return comms;
  }
  for (int r = first; r < first + local; ++r) {
    std::vector<Socket> link;
    link.push_back(join_rendezvous(p, PeerRole::kCommRank, r, fingerprint).first);
    comms.push_back(std::make_unique<SocketCommunicator>(r, size, std::move(link)));
  }
  return comms;
}

}  // namespace

std::unique_ptr<TensorParallelRunner> TensorParallelRunner::create_cpu(const EngineConfig& config,
                                                                       const ModelConfig& model_config) {
  const ParallelConfig& p = config.parallel;
  const int size = static_cast<int>(p.tensor_parallel_size), local = static_cast<int>(p.ranks_per_node());
  const int first = static_cast<int>(p.first_rank());
  validate_tensor_parallel(model_config, size);
  struct Owned {  // kept by the runner until its ranks are gone
    std::shared_ptr<ThreadCommGroup> group;
    std::vector<std::unique_ptr<Communicator>> comms;
  };
  auto owned = std::make_shared<Owned>();
  std::function<void()> abort;
  std::vector<Socket> remote_nodes;
  if (p.nnodes == 1) {
    owned->group = std::make_shared<ThreadCommGroup>(size);
    for (int r = 0; r < size; ++r) owned->comms.push_back(std::make_unique<ThreadCommunicator>(owned->group, r));
    abort = [group = owned->group] { group->abort(); };
  } else {
    const std::string fingerprint = group_fingerprint(config, model_config);
    std::vector<Socket> remote_ranks;
    if (p.node_rank == 0) {
      HostedRendezvous rv = host_rendezvous(p, fingerprint, /*with_comm_ranks=*/true, /*payload=*/"");
      remote_nodes = std::move(rv.nodes);
      remote_ranks = std::move(rv.comm_ranks);
    }
    std::vector<SocketCommunicator*> sockets;
    for (auto& c : connect_socket_ranks(config, fingerprint, std::move(remote_ranks))) {
      sockets.push_back(c.get());
      owned->comms.push_back(std::move(c));
    }
    abort = [sockets] {  // the communicators outlive every caller (the runner's group state, last to go)
      for (SocketCommunicator* c : sockets) c->abort();
    };
  }
  NANOVLLM_INFO("cpu tensor parallel: ranks ", first, "-", first + local - 1, " of ", size,
                p.nnodes > 1 ? " (node " + std::to_string(p.node_rank) + " of " + std::to_string(p.nnodes) + ")" : "");
  auto runner = std::make_unique<TensorParallelRunner>(
      local,
      [&](int r) -> std::unique_ptr<ModelRunner> {
        const TensorParallelPlan plan = shard_for_rank(model_config, first + r, size);
        WeightLoadOptions opt;
        opt.shard = &plan;  // each rank reads its own slices
        set_weight_quantization(opt, config.model, /*fp8_kernels=*/false);
        return std::make_unique<CpuModelRunner>(config, model_config, load_weights(config.model.path, model_config, opt),
                                                TensorParallelRank{plan, owned->comms[static_cast<size_t>(r)].get()});
      },
      abort, owned);
  if (!remote_nodes.empty()) runner->attach_remote_nodes(std::make_unique<RemoteNodes>(std::move(remote_nodes), abort));
  return runner;
}

}  // namespace nanovllm
