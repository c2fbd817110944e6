// ModelRunner: owns the model's weights, KV cache and workspace on one device and turns a scheduled
// batch into sampled tokens. The CPU runner is the reference and CI backend; the CUDA runner (CUDA
// graphs, one H2D copy per step, GPU sampling) implements the same interface.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <vector>

#include "nanovllm/core/backend.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/model/config.h"

namespace nanovllm {

struct RunnerConfig {
  Backend backend = Backend::kCpu;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t block_size = 16;
  int64_t max_model_len = 0;       // longest sequence (prompt + output) the KV cache must hold
  int64_t num_kv_blocks = 0;       // 0: derived from kv_cache_bytes (CPU) or gpu_memory_utilization (CUDA)
  int64_t kv_cache_bytes = 2LL << 30;
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;      // CUDA: no decode graphs
  // Layer-wise CPU KV offload (offload_runner.h): allocated before the paged KV cache when enabled.
  bool enable_cpu_offload = false;
  int64_t num_kv_buffers = 4;        // decode ring of whole-layer KV buffers, 1..8
  int64_t offload_block_size = 1024; // host KV block in tokens (decode flush granularity)
  int64_t cpu_memory_limit = 0;      // bytes of host KV pool; 0: the machine's available memory
};

class OffloadRunner;

// Fails with a clear error unless block_size, max_num_seqs, max_num_batched_tokens and max_model_len are > 0.
void check_runner_config(const RunnerConfig& rc);
// KV blocks a max_model_len sequence needs.
int64_t blocks_per_max_len_seq(const RunnerConfig& rc);

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  static std::unique_ptr<ModelRunner> create(const std::filesystem::path& model_dir, const ModelConfig& config,
                                             const RunnerConfig& runner_config);

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
  // The long-context path (RunnerConfig::enable_cpu_offload), on the same model, stream and workspace;
  // nullptr when offload is off.
  virtual OffloadRunner* offload() { return nullptr; }

 private:
  std::deque<std::vector<SampledToken>> launched_;  // the default launch(): results not yet waited for
};

}  // namespace nanovllm
