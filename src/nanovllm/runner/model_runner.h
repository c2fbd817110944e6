// ModelRunner: owns the model's weights, KV cache and workspace on one device and turns a scheduled
// batch into sampled tokens. The CPU runner is the reference and CI backend; the CUDA runner (CUDA
// graphs, one H2D copy per step, GPU sampling) implements the same interface.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "nanovllm/engine/config.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/model/config.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/sparse/decode_policy.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"

namespace nanovllm {

class LayerTaps;

// The offload path: what it holds and what it did (RunnerStats::offload).
struct OffloadReport {
  OffloadStats steps;            // prefills, decode steps, bytes moved
  OffloadFootprint footprint;    // device memory by term
  // Sparse decode over the offloaded sequences (EngineConfig::sparse.policy not full): the policy's counters (its
  // hot-page cache's are ModelRunner::offload_page_cache, which syncs the device).
  std::optional<SparseDecodeCounters> sparse_decode;
  int64_t lanes = 0;             // offloaded sequences at once
  int64_t kv_bytes_per_token_per_layer = 0;  // K + V of one token and layer (with tensor parallel: one rank's)
};

// What a runner's paths did since it was built, for observers (the CLI's statistics, bench, eval, tests):
// LLMEngine::stats() returns it, so nothing above the runner reaches into its parts. With tensor parallel:
// rank 0's.
struct RunnerStats {
  int64_t num_kv_blocks = 0;                            // the paged cache's
  std::optional<OffloadReport> offload;                 // EngineConfig::offload.enabled
  std::optional<SparseDecodeCounters> sparse_decode;    // EngineConfig::sparse.policy not full
  std::optional<SparsePrefillCounters> sparse_prefill;  // EngineConfig::sparse_prefill.policy not dense
};

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
  // One step of the offloaded sequences (OffloadRunner::execute, on the same model, stream and workspace); a
  // tensor-parallel group runs it on every rank. Requires EngineConfig::offload.enabled.
  virtual std::vector<SampledToken> execute_offloaded(const SchedulerOutput& out);
  // Throws nanovllm::Error when an offloaded sequence of `tokens` tokens would not fit the host memory
  // (OffloadRunner::check_host_memory: every tensor-parallel rank's pool of this host counted).
  virtual void check_offload_memory(int64_t tokens);
  // Host KV bytes an offloaded sequence of `tokens` tokens takes in one rank's pool (rounded up to host blocks).
  virtual int64_t offload_host_bytes(int64_t tokens);
  virtual RunnerStats stats();
  // Offloaded sparse decode: its hot-page cache's hits and misses since the runner was built (zeros without it).
  // Waits for the device.
  virtual PageCacheCounters offload_page_cache();

  // Layer taps (model/layer_taps.h) for the steps run from now on, on both paths; nullptr: none. While
  // set, every step runs eagerly (the CUDA runner neither replays decode graphs nor launches ahead), so
  // each tap sees its step's rows in order. The observer must outlive the steps that use it.
  void set_layer_taps(LayerTaps* taps);

 protected:
  // The long-context path (EngineConfig::offload.enabled); nullptr when offload is off. With tensor parallel:
  // rank 0's.
  virtual OffloadRunner* offload_runner() { return nullptr; }
  // The sparse policies of the paged cache (resident steps); nullptr when dense.
  virtual const SparseDecodePolicy* decode_policy() const { return nullptr; }
  virtual const SparsePrefillAttention* prefill_policy() const { return nullptr; }

  LayerTaps* taps_ = nullptr;

 private:
  OffloadRunner& offload_or_throw(const char* what);  // offload_runner(), or an error naming `what`
  std::deque<std::vector<SampledToken>> launched_;  // the default launch(): results not yet waited for
};

}  // namespace nanovllm
