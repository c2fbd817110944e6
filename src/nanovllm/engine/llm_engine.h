// LLMEngine: requests in, tokens out. Owns the scheduler (with the block manager) and the model runner;
// step() runs one scheduled batch. LLM (llm.h) is the blocking offline API on top.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/engine/sequence.h"
#include "nanovllm/model/config.h"
#include "nanovllm/runner/model_runner.h"

namespace nanovllm {

class Scheduler;

struct EngineConfig {
  std::filesystem::path model;            // a Hugging Face model directory
  Backend backend = Backend::kCpu;        // default_backend(): cuda when a GPU is present
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t block_size = 16;
  int64_t max_model_len = 0;              // 0: the model's limit (rope-scaled max positions)
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  int64_t num_kv_blocks = 0;              // 0: from the memory budget
  int64_t kv_cache_bytes = 2LL << 30;     // CPU backend KV budget
  double gpu_memory_utilization = 0.9;    // CUDA backend
  uint64_t seed = 0;

  static Backend default_backend();
};

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
};

class LLMEngine {
 public:
  explicit LLMEngine(EngineConfig config);
  ~LLMEngine();

  const ModelConfig& model_config() const { return model_config_; }
  const EngineConfig& config() const { return config_; }

  // Throws nanovllm::Error naming the problem: empty or too long prompt, ids outside the vocabulary,
  // invalid sampling params.
  void validate_request(const std::vector<int32_t>& prompt_token_ids, const SamplingParams& params) const;
  // Validates and queues a request; throws (nothing queued) when validate_request would.
  int64_t add_request(std::vector<int32_t> prompt_token_ids, const SamplingParams& params);
  void abort_request(int64_t request_id);
  bool has_unfinished() const;
  // One scheduler + model step. Returns the requests that finished in it.
  std::vector<RequestOutput> step();

  // Counters for progress and metrics.
  int64_t num_generated_tokens() const { return num_generated_tokens_; }
  int64_t num_prompt_tokens_computed() const { return num_prompt_tokens_computed_; }

 private:
  EngineConfig config_;
  ModelConfig model_config_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  int64_t next_request_id_ = 0;
  int64_t num_generated_tokens_ = 0;
  int64_t num_prompt_tokens_computed_ = 0;
};

}  // namespace nanovllm
