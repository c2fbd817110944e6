#include "engine_options.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/device.h"
#include "nanovllm/model/config.h"
#include "option_checks.h"

namespace nanovllm::cli {

void add_engine_options(CLI::App& cmd, EngineOptions& o, bool model_positional) {
  // "model,--model": CLI11 takes it as the first positional argument or as --model.
  cmd.add_option(model_positional ? "model,--model" : "--model", o.model,
                 "Hugging Face model directory (config.json, *.safetensors)")
      ->required();
  cmd.add_option("--backend", o.backend, "cpu | cuda (default: cuda when a GPU is present)");
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "most sequences in one step")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "token budget of one step")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--block-size", o.block_size, "KV cache block size in tokens (default 16, or --sparse-page-size)")
      ->check(in_range(1, 1024));
  cmd.add_option("--max-model-len", o.max_model_len, "longest prompt + output (default: the model's limit)")
      ->check(at_least(0));
  cmd.add_option("--num-kv-blocks", o.num_kv_blocks, "KV cache blocks (default: from the memory budget)")
      ->check(at_least(0));
  cmd.add_option("--kv-cache-gib", o.kv_cache_gib, "CPU backend: KV cache budget in GiB")
      ->check(greater_than(0))
      ->capture_default_str();
  cmd.add_option("--gpu-memory-utilization", o.gpu_memory_utilization, "CUDA backend: share of GPU memory to use")
      ->check(in_range_above(0, 1))
      ->capture_default_str();
  cmd.add_flag("--enforce-eager", o.enforce_eager, "CUDA backend: run decode without CUDA graphs");
  cmd.add_flag("--no-async-scheduling", o.no_async_scheduling,
               "schedule each step only after the previous step's tokens are read");
  cmd.add_flag("--no-prefix-caching", o.no_prefix_caching, "do not reuse KV blocks of shared prompt prefixes");
  cmd.add_flag("--no-chunked-prefill", o.no_chunked_prefill, "prefill each prompt in one step");
  cmd.add_option("--engine-seed", o.engine_seed, "seed of the engine RNG (unseeded requests)");
  cmd.add_flag("--enable-cpu-offload", o.enable_cpu_offload,
               "long context: keep the KV cache of requests that do not fit the GPU cache in host memory "
               "(layer-wise offload)");
  cmd.add_option("--num-kv-buffers", o.num_kv_buffers, "offload: GPU ring of whole-layer KV buffers")
      ->check(in_range(1, 8))
      ->capture_default_str();
  cmd.add_option("--offload-max-num-seqs", o.offload_max_num_seqs,
                 "offload: offloaded requests at once (their decode steps batched; each ring buffer holds a "
                 "layer of each)")
      ->check(in_range(1, 64))
      ->capture_default_str();
  cmd.add_option("--offload-block-size", o.offload_block_size, "offload: host KV block in tokens")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--cpu-memory-limit", o.cpu_memory_limit_gib, "offload: host KV pool limit in GiB (0: available RAM)")
      ->check(at_least(0));
  cmd.add_option("--offload-min-tokens", o.offload_min_tokens,
                 "offload also requests with prompt + max_tokens >= this (0: only those that do not fit the GPU cache)")
      ->check(at_least(0));
  cmd.add_option("--sparse-policy", o.sparse_policy,
                 "decode attention: full | quest (per-head page selection)")
      ->capture_default_str();
  cmd.add_option("--sparse-budget", o.sparse_budget,
                 "sparse decode: keys one query attends, in whole pages (sink and recent pages included)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--sparse-page-size", o.sparse_page_size,
                 "sparse decode: tokens per Quest page; a page is one KV cache block, so this sets --block-size")
      ->check(in_range(1, 1024));
  cmd.add_option("--sparse-gpu-cache-tokens", o.sparse_gpu_cache_tokens,
                 "sparse decode with --enable-cpu-offload: GPU cache of recently selected pages, tokens per layer and "
                 "KV head (0: none; default 4 x --sparse-budget)")
      ->check(at_least(0));
  cmd.add_option("--tensor-parallel-size", o.tensor_parallel_size,
                 "GPUs one model is split over (tensor parallel; threads on --backend cpu), over all nodes")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--nnodes", o.nnodes,
                 "hosts the tensor-parallel group spans (one process each; --tensor-parallel-size / nnodes ranks "
                 "per host); nodes 1.. run `nanovllm worker`")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--node-rank", o.node_rank, "this host's place in the group: 0 runs the engine, 1.. run `nanovllm worker`")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--dist-init-addr", o.dist_init_addr,
                 "HOST:PORT of node 0, where the nodes meet (node 0 listens on PORT)");
  cmd.add_option("--sparse-prefill-policy", o.sparse_prefill_policy,
                 "prefill attention of long chunks: dense | xattention | minference | flexprefill | avgpool "
                 "(block-sparse patterns)")
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-threshold", o.sparse_prefill_threshold,
                 "sparse prefill: the policy's threshold in (0, 1]: xattention tau (default 0.95), flexprefill gamma "
                 "(0.9), avgpool mass share (0.9), minference budget share of the context (0.3)")
      ->check(in_range(0, 1));
  cmd.add_option("--sparse-prefill-dense-layers", o.sparse_prefill_dense_layers,
                 "sparse prefill: the first N layers stay dense")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-min-tokens", o.sparse_prefill_min_tokens,
                 "sparse prefill: chunks whose context (prefix + chunk) is shorter stay dense")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-block-size", o.sparse_prefill_block_size,
                 "sparse prefill: tokens per query block and per key block of the pattern")
      ->check(in_range(1, 4096))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-stride", o.sparse_prefill_stride, "xattention: antidiagonal stride")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-last-q", o.sparse_prefill_last_q,
                 "minference: the chunk's last queries the estimate reads")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-vertical", o.sparse_prefill_vertical,
                 "minference: key columns kept per query head (default: adaptive, from the threshold)")
      ->check(at_least(0));
  cmd.add_option("--sparse-prefill-slash", o.sparse_prefill_slash,
                 "minference: diagonals kept per query head (default: adaptive, from the threshold)")
      ->check(at_least(0));
  cmd.add_option("--sparse-prefill-tau", o.sparse_prefill_tau,
                 "flexprefill: Jensen-Shannon distance below which a head is query-aware")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-min-budget", o.sparse_prefill_min_budget,
                 "flexprefill: at least this many tokens of vertical and of slash blocks")
      ->check(at_least(0))
      ->capture_default_str();
  cmd.add_option("--sparse-prefill-budget", o.sparse_prefill_budget,
                 "xattention, avgpool: at most this many key tokens per query block (whole blocks, sink and diagonal "
                 "included) when the threshold's choice lists more; 0: no limit")
      ->check(at_least(0))
      ->capture_default_str();
}

void add_sampling_options(CLI::App& cmd, SamplingOptions& o) {
  cmd.add_option("--max-tokens", o.max_tokens, "tokens to generate per prompt")
      ->check(at_least(1))
      ->capture_default_str();
  cmd.add_option("--min-tokens", o.min_tokens, "EOS/stop ids are suppressed until this many tokens")
      ->check(at_least(0));
  cmd.add_option("--temperature", o.temperature, "0 = greedy")->check(at_least(0))->capture_default_str();
  cmd.add_option("--top-k", o.top_k, "-1 = off")->check(at_least(-1));
  cmd.add_option("--top-p", o.top_p, "nucleus sampling mass")->check(in_range_above(0, 1));
  cmd.add_option("--min-p", o.min_p, "drop tokens below min_p * max probability")->check(in_range(0, 1));
  cmd.add_option("--repetition-penalty", o.repetition_penalty)->check(greater_than(0));
  cmd.add_option("--presence-penalty", o.presence_penalty)->check(in_range(-2, 2));
  cmd.add_option("--frequency-penalty", o.frequency_penalty)->check(in_range(-2, 2));
  cmd.add_option("--seed", o.seed, "per-request sampling seed")->check(at_least(-1));
  cmd.add_flag("--ignore-eos", o.ignore_eos, "keep generating past EOS");
  cmd.add_option("--logprobs", o.logprobs, "return the top-K logprobs of each generated token")->check(in_range(0, 20));
  cmd.add_option("--stop-token-ids", o.stop_token_ids, "extra token ids that end generation")
      ->delimiter(',')
      ->check(at_least(0));
  cmd.add_option("--logit-bias", o.logit_bias,
                 "ID:BIAS,...: add BIAS (in [-100, 100]) to token ID's logit before sampling (-100 bans it)")
      ->delimiter(',');
}

EngineConfig EngineOptions::to_config() const {
  EngineConfig c;
  c.model.path = model;
  c.model.backend = backend.empty() ? default_backend() : parse_backend(backend);
  c.model.max_model_len = max_model_len;
  if (max_model_len > 0) {  // checked here to name the flag (the engine would say "max_model_len")
    const int64_t limit = ModelConfig::from_model_dir(model).max_model_len();
    NANOVLLM_CHECK(max_model_len <= limit, "--max-model-len ", max_model_len, " is more than the model supports (",
                   limit, " positions)");
  }
  c.model.seed = engine_seed;
  c.model.enforce_eager = enforce_eager;
  NANOVLLM_CHECK(sparse_page_size == 0 || block_size == 0 || sparse_page_size == block_size, "--sparse-page-size ",
                 sparse_page_size, " and --block-size ", block_size, " disagree: a Quest page is one KV cache block");
  c.cache.block_size = block_size > 0 ? block_size : sparse_page_size > 0 ? sparse_page_size : 16;
  c.cache.num_kv_blocks = num_kv_blocks;
  c.cache.kv_cache_bytes = static_cast<int64_t>(kv_cache_gib * (1LL << 30));
  c.cache.gpu_memory_utilization = gpu_memory_utilization;
  c.cache.enable_prefix_caching = !no_prefix_caching;
  c.scheduler.max_num_seqs = max_num_seqs;
  c.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  c.scheduler.enable_chunked_prefill = !no_chunked_prefill;
  c.scheduler.async_scheduling = !no_async_scheduling;
  c.offload.enabled = enable_cpu_offload;
  c.offload.num_kv_buffers = num_kv_buffers;
  c.offload.max_num_seqs = offload_max_num_seqs;
  c.offload.block_size = offload_block_size;
  c.offload.cpu_memory_limit = static_cast<int64_t>(cpu_memory_limit_gib * (1LL << 30));
  c.offload.min_tokens = offload_min_tokens;
  c.sparse.policy = parse_sparse_policy(sparse_policy);
  c.sparse.budget_tokens = sparse_budget;
  c.sparse.gpu_cache_tokens = sparse_gpu_cache_tokens;
  c.parallel.tensor_parallel_size = tensor_parallel_size;
  c.parallel.nnodes = nnodes;
  c.parallel.node_rank = node_rank;
  c.parallel.dist_init_addr = dist_init_addr;
  c.sparse_prefill.policy = parse_sparse_prefill_policy(sparse_prefill_policy);
  c.sparse_prefill.threshold = sparse_prefill_threshold;
  c.sparse_prefill.dense_layers = sparse_prefill_dense_layers;
  c.sparse_prefill.min_tokens = sparse_prefill_min_tokens;
  c.sparse_prefill.block_size = sparse_prefill_block_size;
  c.sparse_prefill.stride = sparse_prefill_stride;
  c.sparse_prefill.last_q = sparse_prefill_last_q;
  c.sparse_prefill.vertical = sparse_prefill_vertical;
  c.sparse_prefill.slash = sparse_prefill_slash;
  c.sparse_prefill.tau = sparse_prefill_tau;
  c.sparse_prefill.min_budget = sparse_prefill_min_budget;
  c.sparse_prefill.budget_tokens = sparse_prefill_budget;
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
  NANOVLLM_CHECK(min_tokens <= max_tokens, "--min-tokens (", min_tokens, ") must be <= --max-tokens (", max_tokens,
                 ")");
  p.logit_bias = parse_logit_bias(logit_bias);
  return p;
}

void SamplingOptions::check_token_ids(const SamplingParams& params, int64_t vocab_size) {
  for (int64_t id : params.stop_token_ids)
    NANOVLLM_CHECK(id < vocab_size, "--stop-token-ids: token id ", id, " is outside the model's vocabulary [0, ",
                   vocab_size, ")");
  for (const auto& [id, bias] : params.logit_bias)
    NANOVLLM_CHECK(id < vocab_size, "--logit-bias: token id ", id, " is outside the model's vocabulary [0, ",
                   vocab_size, ")");
}

std::map<int32_t, float> parse_logit_bias(const std::vector<std::string>& items, const std::string& option) {
  auto trim = [](const std::string& t) {
    const size_t b = t.find_first_not_of(" \t");
    return b == std::string::npos ? std::string() : t.substr(b, t.find_last_not_of(" \t") - b + 1);
  };
  std::map<int32_t, float> bias;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    const std::string id_text = trim(item.substr(0, colon));
    const std::string value = colon == std::string::npos ? std::string() : trim(item.substr(colon + 1));
    char* id_end = nullptr;
    char* value_end = nullptr;
    const long long id = std::strtoll(id_text.c_str(), &id_end, 10);
    const double b = std::strtod(value.c_str(), &value_end);
    const bool digits = !id_text.empty() && id_text.find_first_not_of("0123456789") == std::string::npos;
    NANOVLLM_CHECK(digits && *id_end == '\0' && !value.empty() && *value_end == '\0', option,
                   ": expected ID:BIAS items separated by commas (e.g. 42:-100), got '", item, "'");
    NANOVLLM_CHECK(id <= INT32_MAX, option, ": token id ", id_text, " is too large");
    NANOVLLM_CHECK(b >= -kMaxLogitBias && b <= kMaxLogitBias, option, ": the bias of token ", id,
                   " must be in [-100, 100], got ", value);
    NANOVLLM_CHECK(bias.emplace(static_cast<int32_t>(id), static_cast<float>(b)).second, option, ": token ", id,
                   " is given twice");
  }
  NANOVLLM_CHECK(bias.size() <= kMaxLogitBiasEntries, option, ": ", bias.size(), " tokens; at most ",
                 kMaxLogitBiasEntries, " may be biased");
  return bias;
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
