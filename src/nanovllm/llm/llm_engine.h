// LLMEngine: requests in, tokens out. Owns the scheduler (with the block manager) and the model runner;
// step() runs one scheduled batch. LLM (llm.h) is the blocking offline API on top.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nanovllm/engine/config.h"
#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/engine/sequence.h"
#include "nanovllm/model/config.h"
#include "nanovllm/runner/model_runner.h"

namespace nanovllm {

class Scheduler;
namespace tokenizer {
class Tokenizer;
}
namespace chat {
class ChatTemplate;
}
class StructuredOutputs;

struct RequestOutput {
  int64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;                     // generated tokens
  FinishReason finish_reason = FinishReason::kNone;
  std::vector<std::vector<TokenLogprob>> logprobs;    // per generated token, when asked for
  int64_t num_cached_tokens = 0;                      // prompt tokens served by the prefix cache
  int64_t num_preemptions = 0;                        // times it was preempted and recomputed
  double time_to_first_token_s = 0;
  double latency_s = 0;
  bool finished = false;
  std::string text;  // decoded token_ids (skip_special_tokens); filled by the text APIs (LLM::generate(strings))
};

// What one step() did to one request: the tokens it appended (0 or 1 today; a list so speculative decoding
// can add more) and whether the request ended. For streaming (nanovllm chat, the server).
struct RequestDelta {
  int64_t request_id = 0;
  std::vector<int32_t> new_token_ids;
  std::vector<std::vector<TokenLogprob>> logprobs;  // per new token, when params.logprobs > 0
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
};
using DeltaCallback = std::function<void(const RequestDelta&)>;

class LLMEngine {
 public:
  // Resolves and validates `config` (EngineConfig::resolve) against the model, then builds the runner
  // and the scheduler(s). config() is the resolved config.
  explicit LLMEngine(EngineConfig config);
  ~LLMEngine();

  const ModelConfig& model_config() const { return model_config_; }
  const EngineConfig& config() const { return config_; }

  // Throws nanovllm::Error naming the problem: empty or too long prompt, ids outside the vocabulary,
  // invalid sampling params, a structured-output constraint that does not compile (compiled grammars are
  // cached: add_request then finds it).
  void validate_request(const std::vector<int32_t>& prompt_token_ids, const SamplingParams& params) const;
  // Validates and queues a request; throws (nothing queued) when validate_request would.
  int64_t add_request(std::vector<int32_t> prompt_token_ids, const SamplingParams& params);
  // The same for a prompt several requests share (the n choices of one API request): each sequence holds
  // `prompt` itself, not a copy, until the scheduler admits it (Sequence::shared_prompt).
  int64_t add_request(std::shared_ptr<const std::vector<int32_t>> prompt, const SamplingParams& params);
  void abort_request(int64_t request_id);
  bool has_unfinished() const;
  // One scheduler + model step. Returns the requests that finished in it. With a delta callback set, calls
  // it (on this thread, before returning) once per request that got a token or finished in this step;
  // an aborted request gets its finished delta (no tokens) from the next step().
  std::vector<RequestOutput> step();
  void set_delta_callback(DeltaCallback callback) { delta_callback_ = std::move(callback); }

  // The model directory's tokenizer (tokenizer.json [+ tokenizer_config.json]), loaded once on first use
  // (thread-safe). Throws nanovllm::Error naming the directory when it has no tokenizer.json.
  const tokenizer::Tokenizer& tokenizer() const;
  bool has_tokenizer() const;  // the model directory has tokenizer.json
  // The chat template of tokenizer_config.json (or chat_template.jinja), parsed once on first use.
  // Throws nanovllm::Error when the directory has none.
  const chat::ChatTemplate& chat_template() const;
  // SamplingParams::structured_outputs' grammar engine over the tokenizer (with its compiled-grammar cache),
  // created on first use (thread-safe). Needs the tokenizer.
  StructuredOutputs& structured_outputs() const;

  // Counters for progress and metrics.
  int64_t num_generated_tokens() const { return num_generated_tokens_; }
  // Where step() spends wall time (seconds since construction): the scheduler (schedule + update) and
  // the runner, split into steps with prefill tokens and decode-only steps.
  struct StepStats {
    double schedule_s = 0, prefill_steps_s = 0, decode_steps_s = 0;
    int64_t prefill_steps = 0, decode_steps = 0;
    int64_t scheduled_ahead_steps = 0;  // steps launched before the previous step's tokens were read
  };
  const StepStats& step_stats() const { return step_stats_; }
  int64_t num_prompt_tokens_computed() const { return num_prompt_tokens_computed_; }
  // Whether a request of this prompt length and these params takes the offload path.
  bool is_offloaded(int64_t prompt_len, const SamplingParams& params) const;
  // What the runner's long-context and sparse paths did (RunnerStats). Read on the thread that calls step().
  RunnerStats runner_stats() { return runner_->stats(); }
  // Offloaded sparse decode: its GPU hot-page cache's hits and misses so far. Waits for the device.
  PageCacheCounters offload_page_cache() { return runner_->offload_page_cache(); }
  // Host KV bytes an offloaded request of `tokens` tokens takes in one tensor-parallel rank's pool.
  int64_t offload_host_bytes(int64_t tokens) { return runner_->offload_host_bytes(tokens); }
  // Layer taps (model/layer_taps.h) for the steps run from now on; nullptr: none. The observer must outlive them.
  void set_layer_taps(LayerTaps* taps) { runner_->set_layer_taps(taps); }

  // The model as the engine runs it (config.json, plus tokenizer_config.json's eos token), checked against
  // `config`, which is resolved against it: where the constructor and run_worker start.
  static ModelConfig prepare(EngineConfig& config);
  // `nanovllm worker`: nodes 1..nnodes-1 of a multi-node tensor-parallel group serve node 0's engine
  // (runner/tensor_parallel_worker.h) until it ends; the same settings as node 0's engine.
  static void run_worker(EngineConfig config);
  // Scheduler and KV cache occupancy (for /metrics). Read on the thread that calls step().
  struct LoadStats {
    int64_t num_waiting = 0, num_running = 0;
    int64_t kv_blocks_total = 0, kv_blocks_used = 0;  // used: ref count > 0 (cached-but-free blocks are free)
  };
  LoadStats load_stats() const;

 private:
  EngineConfig config_;
  ModelConfig model_config_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Scheduler> offload_scheduler_;  // offloaded requests: one at a time, whole-prompt prefill
  int64_t next_request_id_ = 0;
  int64_t num_generated_tokens_ = 0;
  StepStats step_stats_;
  int64_t num_prompt_tokens_computed_ = 0;
  // tokenizer_config.json's eos_token, if any.
  static std::optional<int32_t> tokenizer_eos_token_id(const std::filesystem::path& model_dir, int64_t vocab_size);
  // Queues a validated sequence (its tokens set) with the next request id, in the lane it belongs to.
  int64_t add_sequence(std::unique_ptr<Sequence> seq, const SamplingParams& params);
  std::vector<SampledToken> run_step(Scheduler& scheduler, bool offloaded);
  std::vector<SampledToken> finish_launched_step(bool has_prefill);
  void drop_finished(SchedulerOutput& out) const;
  // The main lane's step launched on the runner and not yet waited for (async scheduling), if any.
  std::optional<SchedulerOutput> launched_;
  void emit_deltas(const std::vector<SampledToken>& sampled, const std::vector<RequestOutput>& finished) const;

  DeltaCallback delta_callback_;
  // Lazily loaded text I/O (llm_text.cpp).
  mutable std::mutex text_mu_;
  mutable std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  mutable std::shared_ptr<const chat::ChatTemplate> chat_template_;
  mutable std::unique_ptr<StructuredOutputs> structured_outputs_;
};

}  // namespace nanovllm
