// CLI options shared by the subcommands that run the engine (generate, chat, serve, bench).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/llm/llm_engine.h"

namespace nanovllm::cli {

struct EngineOptions {
  std::string model;
  std::string backend;  // empty: cuda when a GPU is present, else cpu
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t block_size = 0;  // 0: sparse_page_size if given, else 16
  int64_t max_model_len = 0;
  int64_t num_kv_blocks = 0;
  double kv_cache_gib = 2.0;
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  bool no_async_scheduling = false;
  bool no_prefix_caching = false;
  bool no_chunked_prefill = false;
  uint64_t engine_seed = 0;
  bool enable_cpu_offload = false;
  int64_t num_kv_buffers = 4;
  int64_t offload_max_num_seqs = 1;
  int64_t offload_block_size = 1024;
  double cpu_memory_limit_gib = 0;
  int64_t offload_min_tokens = 0;
  std::string sparse_policy = "full";
  int64_t sparse_budget = 2048;
  int64_t sparse_page_size = 0;  // 0: the block size
  int64_t sparse_gpu_cache_tokens = -1;  // -1: 4 x sparse_budget
  int64_t tensor_parallel_size = 1;
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string dist_init_addr;
  std::string sparse_prefill_policy = "dense";
  double sparse_prefill_threshold = 0;  // 0: the policy's default
  int64_t sparse_prefill_dense_layers = 0;
  int64_t sparse_prefill_min_tokens = 8192;
  int64_t sparse_prefill_block_size = 128;
  int64_t sparse_prefill_stride = 8;
  int64_t sparse_prefill_last_q = 64;
  int64_t sparse_prefill_vertical = 0;  // 0: adaptive
  int64_t sparse_prefill_slash = 0;     // 0: adaptive
  double sparse_prefill_tau = 0.1;
  int64_t sparse_prefill_min_budget = 1024;
  int64_t sparse_prefill_budget = 0;  // 0: no limit

  EngineConfig to_config() const;
};

struct SamplingOptions {
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;
  float temperature = 1.0f;
  int64_t top_k = -1;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;  // -1: unseeded
  bool ignore_eos = false;
  int64_t logprobs = 0;
  std::vector<int64_t> stop_token_ids;
  std::vector<std::string> logit_bias;  // "ID:BIAS" items

  // Throws nanovllm::Error naming the flag for what the option checks cannot see: --min-tokens above
  // --max-tokens, malformed --logit-bias items.
  SamplingParams to_params() const;
  // The checks that need the model: token ids of --stop-token-ids and --logit-bias inside the vocabulary.
  static void check_token_ids(const SamplingParams& params, int64_t vocab_size);
};

// `model_positional`: the model directory may also be given as the first positional argument
// (`nanovllm serve MODEL`, as `vllm serve MODEL`).
void add_engine_options(CLI::App& cmd, EngineOptions& o, bool model_positional = false);
void add_sampling_options(CLI::App& cmd, SamplingOptions& o);

// "5:10, 7:-100" -> {5: 10, 7: -100}; throws nanovllm::Error naming `option` for anything else (a bias
// outside [-100, 100], an id given twice, more than kMaxLogitBias entries).
std::map<int32_t, float> parse_logit_bias(const std::vector<std::string>& items,
                                          const std::string& option = "--logit-bias");

// "1, 2,3" -> {1, 2, 3}; anything else (empty, non-digits, overflow) throws nanovllm::Error naming `option`.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option = "--prompt-ids");

// A JSON file holding a list of token-id lists; a clear error for anything else.
std::vector<std::vector<int32_t>> read_token_id_lists(const std::string& path);

}  // namespace nanovllm::cli
