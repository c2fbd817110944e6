#include "engine_options.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/device.h"

namespace nanovllm::cli {

void add_engine_options(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("--model", o.model, "Hugging Face model directory (config.json, *.safetensors)")->required();
  cmd.add_option("--backend", o.backend, "cpu | cuda (default: cuda when a GPU is present)");
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "most sequences in one step")->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "token budget of one step")
      ->capture_default_str();
  cmd.add_option("--block-size", o.block_size, "KV cache block size in tokens")->capture_default_str();
  cmd.add_option("--max-model-len", o.max_model_len, "longest prompt + output (default: the model's limit)");
  cmd.add_option("--num-kv-blocks", o.num_kv_blocks, "KV cache blocks (default: from the memory budget)");
  cmd.add_option("--kv-cache-gib", o.kv_cache_gib, "CPU backend: KV cache budget in GiB")->capture_default_str();
  cmd.add_option("--gpu-memory-utilization", o.gpu_memory_utilization, "CUDA backend: share of GPU memory to use")
      ->capture_default_str();
  cmd.add_flag("--enforce-eager", o.enforce_eager, "CUDA backend: run decode without CUDA graphs");
  cmd.add_flag("--no-async-scheduling", o.no_async_scheduling,
               "schedule each step only after the previous step's tokens are read");
  cmd.add_flag("--no-prefix-caching", o.no_prefix_caching, "do not reuse KV blocks of shared prompt prefixes");
  cmd.add_flag("--no-chunked-prefill", o.no_chunked_prefill, "prefill each prompt in one step");
  cmd.add_option("--engine-seed", o.engine_seed, "seed of the engine RNG (unseeded requests)");
  cmd.add_flag("--enable-cpu-offload", o.enable_cpu_offload,
               "long context: keep the KV cache of requests that do not fit the GPU cache in host memory "
               "(layer-wise offload, one such request at a time)");
  cmd.add_option("--num-kv-buffers", o.num_kv_buffers, "offload: GPU ring of whole-layer KV buffers (1-8)")
      ->capture_default_str();
  cmd.add_option("--offload-block-size", o.offload_block_size, "offload: host KV block in tokens")->capture_default_str();
  cmd.add_option("--cpu-memory-limit", o.cpu_memory_limit_gib, "offload: host KV pool limit in GiB (0: available RAM)");
  cmd.add_option("--offload-min-tokens", o.offload_min_tokens,
                 "offload also requests with prompt + max_tokens >= this (0: only those that do not fit the GPU cache)");
  cmd.add_option("--sparse-policy", o.sparse_policy,
                 "decode attention: full | quest (per-head page selection; CPU backend for now)")
      ->capture_default_str();
  cmd.add_option("--sparse-budget", o.sparse_budget,
                 "sparse decode: keys one query attends, in whole KV blocks (sink and recent pages included)")
      ->capture_default_str();
}

void add_sampling_options(CLI::App& cmd, SamplingOptions& o) {
  cmd.add_option("--max-tokens", o.max_tokens, "tokens to generate per prompt")->capture_default_str();
  cmd.add_option("--min-tokens", o.min_tokens, "EOS/stop ids are suppressed until this many tokens");
  cmd.add_option("--temperature", o.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", o.top_k, "-1 = off");
  cmd.add_option("--top-p", o.top_p, "nucleus sampling mass");
  cmd.add_option("--min-p", o.min_p, "drop tokens below min_p * max probability");
  cmd.add_option("--repetition-penalty", o.repetition_penalty);
  cmd.add_option("--presence-penalty", o.presence_penalty);
  cmd.add_option("--frequency-penalty", o.frequency_penalty);
  cmd.add_option("--seed", o.seed, "per-request sampling seed");
  cmd.add_flag("--ignore-eos", o.ignore_eos, "keep generating past EOS");
  cmd.add_option("--logprobs", o.logprobs, "return the top-K logprobs of each generated token");
  cmd.add_option("--stop-token-ids", o.stop_token_ids, "extra token ids that end generation")->delimiter(',');
}

EngineConfig EngineOptions::to_config() const {
  EngineConfig c;
  c.model.path = model;
  c.model.backend = backend.empty() ? default_backend() : parse_backend(backend);
  c.model.max_model_len = max_model_len;
  c.model.seed = engine_seed;
  c.model.enforce_eager = enforce_eager;
  c.cache.block_size = block_size;
  c.cache.num_kv_blocks = num_kv_blocks;
  NANOVLLM_CHECK(kv_cache_gib > 0, "--kv-cache-gib must be > 0");
  c.cache.kv_cache_bytes = static_cast<int64_t>(kv_cache_gib * (1LL << 30));
  c.cache.gpu_memory_utilization = gpu_memory_utilization;
  c.cache.enable_prefix_caching = !no_prefix_caching;
  c.scheduler.max_num_seqs = max_num_seqs;
  c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  c.scheduler.enable_chunked_prefill = !no_chunked_prefill;
  c.scheduler.async_scheduling = !no_async_scheduling;
  c.offload.enabled = enable_cpu_offload;
  c.offload.num_kv_buffers = num_kv_buffers;
  c.offload.block_size = offload_block_size;
  NANOVLLM_CHECK(cpu_memory_limit_gib >= 0, "--cpu-memory-limit must be >= 0");
  c.offload.cpu_memory_limit = static_cast<int64_t>(cpu_memory_limit_gib * (1LL << 30));
  c.offload.min_tokens = offload_min_tokens;
  c.sparse.policy = parse_sparse_policy(sparse_policy);
  c.sparse.budget_tokens = sparse_budget;
  return c;
}

SamplingParams SamplingOptions::to_params() const {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.min_tokens = min_tokens;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
  p.ignore_eos = ignore_eos;
  p.logprobs = logprobs;
  p.stop_token_ids = stop_token_ids;
  return p;
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    NANOVLLM_CHECK(j > i && j - i <= 10, option, ": expected comma-separated non-negative integers, got '", text,
                   "'");
    const long long v = std::strtoll(text.substr(i, j - i).c_str(), nullptr, 10);
    NANOVLLM_CHECK(v <= INT32_MAX, option, ": token id ", text.substr(i, j - i), " is too large");
    ids.push_back(static_cast<int32_t>(v));
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
    if (j < text.size()) {
      NANOVLLM_CHECK(text[j] == ',' && j + 1 < text.size(), option, ": expected comma-separated integers, got '",
                     text, "'");
      ++j;
    }
    i = j;
  }
  NANOVLLM_CHECK(!ids.empty(), option, ": empty list");
  return ids;
}

std::vector<std::vector<int32_t>> read_token_id_lists(const std::string& path) {
  std::ifstream f(path);
  NANOVLLM_CHECK(f.good(), "cannot read ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    NANOVLLM_FAIL(path, ": invalid JSON: ", e.what());
  }
  NANOVLLM_CHECK(j.is_array(), path, ": expected a JSON list of token-id lists");
  std::vector<std::vector<int32_t>> lists;
  for (const auto& item : j) {
    NANOVLLM_CHECK(item.is_array(), path, ": entry ", lists.size(), " is not a list of token ids");
    std::vector<int32_t> ids;
    for (const auto& id : item) {
      NANOVLLM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX, path,
                     ": entry ", lists.size(), " holds a value that is not a token id: ", id.dump());
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    lists.push_back(std::move(ids));
  }
  return lists;
}

}  // namespace nanovllm::cli
