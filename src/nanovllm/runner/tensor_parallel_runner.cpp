#include "nanovllm/runner/tensor_parallel_runner.h"

#include <algorithm>
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/weights.h"
#include "nanovllm/runner/cpu_model_runner.h"
#include "nanovllm/runner/thread_communicator.h"

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

int64_t TensorParallelRunner::num_kv_blocks() const {
  int64_t blocks = ranks_[0]->num_kv_blocks();
  for (const auto& r : ranks_) blocks = std::min(blocks, r->num_kv_blocks());
  return blocks;
}

std::vector<SampledToken> TensorParallelRunner::on_all_ranks(
    const std::function<std::vector<SampledToken>(ModelRunner&)>& fn) {
  NANOVLLM_CHECK(failed_.empty(), "the tensor-parallel group failed in an earlier step (", failed_,
                 "); it does not recover");
  NANOVLLM_CHECK(taps_ == nullptr, "layer taps with tensor_parallel_size > 1 are not supported");
  std::vector<SampledToken> tokens;
  try {
    threads_.run([&](int r) {
      std::vector<SampledToken> t = fn(*ranks_[static_cast<size_t>(r)]);
      if (r == 0) tokens = std::move(t);
    });
  } catch (const std::exception& e) {
    failed_ = e.what();
    throw;
  }
  return tokens;
}

std::vector<SampledToken> TensorParallelRunner::execute(const SchedulerOutput& out) {
  return on_all_ranks([&](ModelRunner& r) { return r.execute(out); });
}

std::vector<SampledToken> TensorParallelRunner::execute_offloaded(const SchedulerOutput& out) {
  return on_all_ranks([&](ModelRunner& r) { return r.execute_offloaded(out); });
}

// Every rank decides alike (same step, same configuration), so rank 0 answers for the group.
bool TensorParallelRunner::can_launch(const SchedulerOutput& out) const {
  return ranks_launch_ ? ranks_[0]->can_launch(out) : ModelRunner::can_launch(out);
}

void TensorParallelRunner::launch(const SchedulerOutput& out, bool fed_from_previous) {
  if (!ranks_launch_) return ModelRunner::launch(out, fed_from_previous);
  on_all_ranks([&](ModelRunner& r) {
    r.launch(out, fed_from_previous);
    return std::vector<SampledToken>{};
  });
}

std::vector<SampledToken> TensorParallelRunner::wait_oldest() {
  if (!ranks_launch_) return ModelRunner::wait_oldest();
  return on_all_ranks([](ModelRunner& r) { return r.wait_oldest(); });
}

std::unique_ptr<ModelRunner> TensorParallelRunner::create_cpu(const EngineConfig& config,
                                                              const ModelConfig& model_config) {
  const int size = static_cast<int>(config.parallel.tensor_parallel_size);
  validate_tensor_parallel(model_config, size);
  auto group = std::make_shared<ThreadCommGroup>(size);
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<ThreadCommunicator>(group, r));
  struct Owned {  // kept by the runner until its ranks are gone
    std::shared_ptr<ThreadCommGroup> group;
    std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  };
  auto owned = std::make_shared<Owned>(Owned{group, std::move(comms)});
  NANOVLLM_INFO("cpu tensor parallel: ", size, " ranks");
  return std::make_unique<TensorParallelRunner>(
      size,
      [&](int r) -> std::unique_ptr<ModelRunner> {
        const TensorParallelPlan plan = shard_for_rank(model_config, r, size);
        WeightLoadOptions opt;
        opt.shard = &plan;  // each rank reads its own slices
        return std::make_unique<CpuModelRunner>(config, model_config, load_weights(config.model.path, model_config, opt),
                                                TensorParallelRank{plan, owned->comms[static_cast<size_t>(r)].get()});
      },
      [group] { group->abort(); }, owned);
}

}  // namespace nanovllm
