// ModelRunner: owns the model's weights, KV cache and workspace on one device and turns a scheduled
// batch into sampled tokens. The CPU runner is the reference and CI backend; the CUDA runner (CUDA
// graphs, one H2D copy per step, GPU sampling) implements the same interface.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "nanovllm/engine/config.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/model/config.h"

namespace nanovllm {

class LayerTaps;
class OffloadRunner;
struct QuestCounters;
struct SparsePrefillCounters;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // The runner of config.model.backend for the checkpoint at config.model.path (parsed: model_config).
  // `config` as resolved by EngineConfig::resolve; cache.num_kv_blocks 0: from the memory budget.
  static std::unique_ptr<ModelRunner> create(const EngineConfig& config, const ModelConfig& model_config);

  virtual int64_t num_kv_blocks() const = 0;
  // Runs one step: writes the scheduled tokens' K/V into the cache and samples the next token of every
  // sequence with sample == true (in SchedulerOutput order).
  virtual std::vector<SampledToken> execute(const SchedulerOutput& out) = 0;

  // Launched steps (the engine's async scheduling, Scheduler::can_schedule_ahead): launch() starts a
  // step and may return before it ends; wait_oldest() returns the sampled tokens of the oldest launched
  // step not yet waited for. At most two steps are launched and not waited for; a launch with
  // `fed_from_previous` reads, as each sequence's last token (kPendingToken on the host), the token the
  // step launched just before it sampled for that sequence, which must have had every one of its
  // sequences. execute() only runs with no launched step outstanding.
  // This default runs the step inside launch(); a backend overrides the three to overlap.
  virtual bool can_launch(const SchedulerOutput& out) const;
  virtual void launch(const SchedulerOutput& out, bool fed_from_previous);
  virtual std::vector<SampledToken> wait_oldest();
  // The long-context path (EngineConfig::offload.enabled), on the same model, stream and workspace;
  // nullptr when offload is off. With tensor parallel: rank 0's (its stats; check_host_memory counts
  // every rank's pool).
  virtual OffloadRunner* offload() { return nullptr; }
  // One step of the offloaded sequence (OffloadRunner::execute); a tensor-parallel group runs it on every
  // rank. Requires offload().
  virtual std::vector<SampledToken> execute_offloaded(const SchedulerOutput& out);
  // What the sparse decode policy did (EngineConfig::sparse); nullptr when attention is dense.
  virtual const QuestCounters* sparse_counters() const { return nullptr; }
  // What the sparse prefill policy did (EngineConfig::sparse_prefill), on both paths; nullptr when it is dense.
  virtual const SparsePrefillCounters* sparse_prefill_counters() const { return nullptr; }

  // Layer taps (model/layer_taps.h) for the steps run from now on, on both paths; nullptr: none. While
  // set, every step runs eagerly (the CUDA runner neither replays decode graphs nor launches ahead), so
  // each tap sees its step's rows in order. The observer must outlive the steps that use it.
  void set_layer_taps(LayerTaps* taps);

 protected:
  LayerTaps* taps_ = nullptr;

 private:
  std::deque<std::vector<SampledToken>> launched_;  // the default launch(): results not yet waited for
};

}  // namespace nanovllm
