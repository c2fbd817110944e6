// TensorParallelRunner: one model split over N ranks of this process (docs/tensor_parallel.md). Each rank
// is an ordinary ModelRunner over its shard — its heads, MLP columns and vocabulary rows, with the
// collectives inside the decoder — on its own thread (RankThreads; rank 0 on the engine thread). The
// engine drives it like one runner: every step goes to every rank (each builds its own inputs from the
// same SchedulerOutput), and rank 0's sampled tokens are the step's (it samples the gathered logits).
//
// A rank that throws aborts the group: the others' collectives fail instead of hanging, the step throws
// the failing rank's error, and every later step throws too (a group does not recover).
//
// Past one host (nnodes > 1) this runner is node 0's: its ranks are global ranks 0..G-1, and every call
// also goes to the other nodes (RemoteNodes), whose `nanovllm worker` runs it on their ranks
// (tensor_parallel_worker.h); the call returns when every node is done.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nanovllm/runner/model_runner.h"
#include "nanovllm/runner/rank_threads.h"
#include "nanovllm/runner/remote_nodes.h"

namespace nanovllm {

class TensorParallelRunner final : public ModelRunner {
 public:
  // make_rank(r) builds rank r's runner; it runs on rank r's thread, all ranks at once (a CUDA rank sets
  // its device there; NCCL communicators are created by all ranks together). abort_group wakes the ranks
  // blocked in a collective of the group (ThreadCommGroup::abort, ncclCommAbort). `group_state` (the
  // communicators the ranks use) is kept until the ranks are gone. Throws the first rank's error if a
  // rank cannot be built.
  // ranks_launch: the ranks' own launch / wait_oldest overlap steps and feed tokens on their devices
  // (CUDA: every rank samples the same gathered logits), so the group fans them out; otherwise (CPU ranks,
  // only rank 0 samples) the group runs each launched step at once (ModelRunner's default).
  // step_timeout > 0: a construction, start or step that takes longer aborts the group (RankThreads'
  // watchdog) and throws, instead of hanging when a rank is stuck.
  // start_rank (optional) runs on every rank once all are built: work with collectives (warm-up steps,
  // graph capture) must not overlap another rank's construction (see CudaModelRunner::start_tensor_parallel).
  TensorParallelRunner(int size, const std::function<std::unique_ptr<ModelRunner>(int rank)>& make_rank,
                       std::function<void()> abort_group, std::shared_ptr<void> group_state = nullptr,
                       bool ranks_launch = false, const std::function<void(ModelRunner&)>& start_rank = nullptr,
                       std::chrono::milliseconds step_timeout = std::chrono::milliseconds::zero());

  // The CPU backend's ranks of this node: rank r's runner on its slices of the checkpoint
  // (WeightLoadOptions::shard). One node: the ranks talk through a ThreadCommGroup. Several
  // (config.parallel.nnodes): through SocketCommunicators; node 0 meets the other nodes first
  // (host_rendezvous) and attaches them, a worker's ranks connect to node 0 as they are built.
  static std::unique_ptr<TensorParallelRunner> create_cpu(const EngineConfig& config, const ModelConfig& model_config);

  // Node 0 of a multi-node group: the other nodes, once their ranks are built (waits for their "ready").
  void attach_remote_nodes(std::unique_ptr<RemoteNodes> nodes);

  int64_t num_kv_blocks() const override;  // the smallest rank's: block ids are the same on every rank
  std::vector<SampledToken> execute(const SchedulerOutput& out) override;
  bool can_launch(const SchedulerOutput& out) const override;
  void launch(const SchedulerOutput& out, bool fed_from_previous) override;
  std::vector<SampledToken> wait_oldest() override;
  const QuestCounters* sparse_counters() const override { return ranks_[0]->sparse_counters(); }
  // Rank 0's: every rank runs the same chunks sparsely (its own KV heads' patterns).
  const SparsePrefillCounters* sparse_prefill_counters() const override {
    return ranks_[0]->sparse_prefill_counters();
  }
  OffloadRunner* offload() override { return ranks_[0]->offload(); }
  std::vector<SampledToken> execute_offloaded(const SchedulerOutput& out) override;

 private:
  std::shared_ptr<void> group_state_;  // first: outlives the ranks
  std::vector<std::unique_ptr<ModelRunner>> ranks_;
  // Runs fn(rank runner) on every rank (and `op` on the remote nodes); rank 0's result is returned. Checks
  // and records group failure.
  std::vector<SampledToken> on_all_ranks(StepOp op, const SchedulerOutput* out, bool fed_from_previous,
                                         const std::function<std::vector<SampledToken>(ModelRunner&)>& fn);

  bool ranks_launch_ = false;
  std::string failed_;  // the error that broke the group; empty while it works
  RankThreads threads_;  // joined before the ranks are destroyed
  int64_t remote_kv_blocks_ = -1;       // the other nodes' smallest num_kv_blocks (-1: one node)
  std::unique_ptr<RemoteNodes> remote_;  // last: the nodes are told to shut down first
};

}  // namespace nanovllm
