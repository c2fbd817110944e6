#include "nanovllm/engine/engine_options.h"

#include <cmath>
#include <cstdio>
#include <type_traits>

#include "nanovllm/core/error.h"
#include "nanovllm/sparse/policies.h"

namespace nanovllm {
namespace {

using Kind = EngineOption::Kind;

// An option bound to the field c.*sub.*member; its kind follows the field's type.
template <class Sub, class T>
EngineOption bound(std::string name, std::string group, Sub EngineConfig::*sub, T Sub::*member, std::string help) {
  EngineOption o;
  o.name = std::move(name);
  o.group = std::move(group);
  o.help = std::move(help);
  o.get = [sub, member](const EngineConfig& c) -> OptionValue {
    const T& v = c.*sub.*member;
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string> || std::is_same_v<T, double>) {
      return v;
    } else {
      return static_cast<int64_t>(v);
    }
  };
  o.set = [sub, member](EngineConfig& c, const OptionValue& v) {
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string> || std::is_same_v<T, double>) {
      c.*sub.*member = std::get<T>(v);
    } else {
      c.*sub.*member = static_cast<T>(std::get<int64_t>(v));
    }
  };
  if constexpr (std::is_same_v<T, bool>) {
    o.kind = Kind::kFlag;
  } else if constexpr (std::is_same_v<T, std::string>) {
    o.kind = Kind::kText;
  } else if constexpr (std::is_same_v<T, double>) {
    o.kind = Kind::kReal;
  } else {
    static_assert(std::is_integral_v<T>);
    o.kind = Kind::kInt;
    if constexpr (std::is_unsigned_v<T>) o.min = 0;
  }
  return o;
}

std::vector<EngineOption> make_table() {
  std::vector<EngineOption> t;
  auto add = [&t](EngineOption o) -> EngineOption& { return t.emplace_back(std::move(o)); };
  constexpr double kGiB = 1 << 30;

  // ---- model ----
  {
    EngineOption& o = add({});
    o.name = "backend";
    o.group = "model";
    o.kind = Kind::kText;
    o.help = "where the engine runs";
    o.choices = [] { return std::string("cpu | cuda"); };
    o.default_text = "cuda when a GPU is present, else cpu";
    o.get = [](const EngineConfig& c) -> OptionValue { return std::string(to_string(c.model.backend)); };
    o.set = [](EngineConfig& c, const OptionValue& v) { c.model.backend = parse_backend(std::get<std::string>(v)); };
  }
  add(bound("max_model_len", "model", &EngineConfig::model, &ModelOptions::max_model_len,
            "longest prompt + output in tokens (0: the model's limit, its rope-scaled max positions)"))
      .min = 0;
  {
    EngineOption& o = add(bound("seed", "model", &EngineConfig::model, &ModelOptions::seed,
                                "seed of the engine RNG: gives unseeded requests their sampling key"));
    o.cli_flags = {"--engine-seed"};
  }
  add(bound("enforce_eager", "model", &EngineConfig::model, &ModelOptions::enforce_eager,
            "CUDA backend: run decode without CUDA graphs"));
  add(bound("quantization", "model", &EngineConfig::model, &ModelOptions::quantization,
            "projection weights: auto (as the checkpoint: fp8 for a block-scaled FP8 one), fp8 (also quantize a "
            "bf16 checkpoint per 128x128 block at load), none (dequantize an FP8 checkpoint)"))
      .choices = [] { return std::string("auto | fp8 | none"); };

  // ---- cache ----
  {
    EngineOption& o = add(bound("block_size", "cache", &EngineConfig::cache, &CacheConfig::block_size,
                                "KV cache block size in tokens; a sparse decode page is one block"));
    o.min = 1;
    o.max = 1024;
    o.cli_flags = {"--block-size", "--sparse-page-size"};
    o.python_aliases = {"kvcache_block_size"};
  }
  {
    EngineOption& o = add(bound("num_kv_blocks", "cache", &EngineConfig::cache, &CacheConfig::num_kv_blocks,
                                "KV cache blocks (0 or -1: from the memory budget)"));
    o.min = -1;
    o.python_aliases = {"num_kvcache_blocks"};
    o.set = [](EngineConfig& c, const OptionValue& v) { c.cache.num_kv_blocks = std::max<int64_t>(0, std::get<int64_t>(v)); };
  }
  {
    EngineOption& o = add(bound("kv_cache_bytes", "cache", &EngineConfig::cache, &CacheConfig::kv_cache_bytes,
                                "CPU backend: KV cache budget in bytes (the CLI's --kv-cache-gib: in GiB)"));
    o.min = 0;
    o.min_exclusive = true;
    o.cli_flags = {"--kv-cache-gib"};
    o.cli_scale = kGiB;
  }
  {
    EngineOption& o = add(bound("gpu_memory_utilization", "cache", &EngineConfig::cache,
                                &CacheConfig::gpu_memory_utilization, "CUDA backend: share of GPU memory to use"));
    o.min = 0;
    o.min_exclusive = true;
    o.max = 1;
  }
  add(bound("kv_cache_dtype", "cache", &EngineConfig::cache, &CacheConfig::kv_cache_dtype,
            "KV cache elements, GPU and host: auto (the model's dtype), bf16, fp8 (e4m3 with a scale per token and "
            "KV head; fp8_e4m3 is the same)"))
      .choices = [] { return std::string("auto | bf16 | fp8 | fp8_e4m3"); };
  {
    EngineOption& o = add(bound("enable_prefix_caching", "cache", &EngineConfig::cache,
                                &CacheConfig::enable_prefix_caching, "reuse KV blocks of shared prompt prefixes"));
    o.cli_flags = {"--no-prefix-caching"};
    o.cli_negated = true;
  }

  // ---- scheduler ----
  add(bound("max_num_seqs", "scheduler", &EngineConfig::scheduler, &SchedulerConfig::max_num_seqs,
            "most sequences in one step"))
      .min = 1;
  add(bound("max_num_batched_tokens", "scheduler", &EngineConfig::scheduler, &SchedulerConfig::max_num_batched_tokens,
            "token budget of one step"))
      .min = 1;
  {
    EngineOption& o = add(bound("enable_chunked_prefill", "scheduler", &EngineConfig::scheduler,
                                &SchedulerConfig::enable_chunked_prefill,
                                "split long prompts over several steps (off: a prompt waits until it fits one step)"));
    o.cli_flags = {"--no-chunked-prefill"};
    o.cli_negated = true;
  }
  {
    EngineOption& o = add(bound("async_scheduling", "scheduler", &EngineConfig::scheduler,
                                &SchedulerConfig::async_scheduling,
                                "schedule step N + 1 while step N runs (off: after its tokens are read)"));
    o.cli_flags = {"--no-async-scheduling"};
    o.cli_negated = true;
  }

  // ---- offload ----
  add(bound("enable_cpu_offload", "offload", &EngineConfig::offload, &OffloadConfig::enabled,
            "long context: keep the KV cache of requests that do not fit the GPU cache in host memory (layer-wise "
            "offload)"));
  {
    EngineOption& o = add(bound("num_kv_buffers", "offload", &EngineConfig::offload, &OffloadConfig::num_kv_buffers,
                                "offload: GPU ring of whole-layer KV buffers"));
    o.min = 1;
    o.max = 8;
  }
  {
    EngineOption& o = add(bound("offload_max_num_seqs", "offload", &EngineConfig::offload,
                                &OffloadConfig::max_num_seqs,
                                "offload: offloaded requests at once (their decode steps batched; each ring buffer "
                                "holds a layer of each)"));
    o.min = 1;
    o.max = 64;
  }
  add(bound("offload_block_size", "offload", &EngineConfig::offload, &OffloadConfig::block_size,
            "offload: host KV block in tokens (decode buffer length, flush granularity)"))
      .min = 1;
  {
    EngineOption& o = add(bound("cpu_memory_limit", "offload", &EngineConfig::offload,
                                &OffloadConfig::cpu_memory_limit,
                                "offload: host KV pool limit in bytes, the CLI's in GiB (0: available memory)"));
    o.min = 0;
    o.cli_scale = kGiB;
  }
  add(bound("offload_min_tokens", "offload", &EngineConfig::offload, &OffloadConfig::min_tokens,
            "offload also requests with prompt + max_tokens >= this (0: only those that do not fit the GPU cache)"))
      .min = 0;

  // ---- sparse decode ----
  {
    EngineOption& o = add(bound("sparse_policy", "sparse", &EngineConfig::sparse, &SparseConfig::policy,
                                "decode attention: which pages of its context a decode query attends"));
    o.choices = decode_policy_choices;
  }
  {
    EngineOption& o = add(bound("sparse_budget", "sparse", &EngineConfig::sparse, &SparseConfig::budget_tokens,
                                "sparse decode: keys one query attends, in whole pages (sink and recent pages "
                                "included)"));
    o.min = 1;
  }
  {
    EngineOption& o = add(bound("sparse_gpu_cache_tokens", "sparse", &EngineConfig::sparse,
                                &SparseConfig::gpu_cache_tokens,
                                "sparse decode with CPU offload: GPU cache of recently selected pages, tokens per "
                                "layer and KV head (0: none; -1: 16 x sparse_budget, at most a sequence's tokens)"));
    o.min = -1;
  }

  // ---- tensor parallel ----
  add(bound("tensor_parallel_size", "parallel", &EngineConfig::parallel, &ParallelConfig::tensor_parallel_size,
            "GPUs one model is split over (tensor parallel; threads on the cpu backend), over all nodes"))
      .min = 1;
  add(bound("nnodes", "parallel", &EngineConfig::parallel, &ParallelConfig::nnodes,
            "hosts the tensor-parallel group spans (one process each); nodes 1.. run `nanovllm worker`"))
      .min = 1;
  add(bound("node_rank", "parallel", &EngineConfig::parallel, &ParallelConfig::node_rank,
            "this host's place in the group: 0 runs the engine, 1.. run `nanovllm worker`"))
      .min = 0;
  add(bound("dist_init_addr", "parallel", &EngineConfig::parallel, &ParallelConfig::dist_init_addr,
            "HOST:PORT of node 0, where the nodes meet (node 0 listens on PORT)"));

  // ---- sparse prefill ----
  {
    EngineOption& o = add({});
    o.name = "sparse_prefill_policy";
    o.group = "sparse_prefill";
    o.kind = Kind::kText;
    o.help = "prefill attention of long chunks: a block-sparse pattern from an estimator";
    o.choices = prefill_policy_choices;
    o.get = [](const EngineConfig& c) -> OptionValue {
      return std::string(sparse_prefill_policy_name(c.sparse_prefill.policy));
    };
    o.set = [](EngineConfig& c, const OptionValue& v) {
      c.sparse_prefill.policy = parse_sparse_prefill_policy(std::get<std::string>(v));
    };
  }
  {
    EngineOption& o = add(bound("sparse_prefill_threshold", "sparse_prefill", &EngineConfig::sparse_prefill,
                                &SparsePrefillConfig::threshold,
                                "sparse prefill: the policy's threshold in (0, 1] (0: its default: xattention tau "
                                "0.95, flexprefill gamma 0.9, avgpool mass share 0.9, minference budget share 0.3)"));
    o.min = 0;
    o.max = 1;
  }
  using SP = SparsePrefillConfig;
  auto prefill_int = [&](const char* name, int64_t SP::*member, const char* help, double min) {
    add(bound(name, "sparse_prefill", &EngineConfig::sparse_prefill, member, help)).min = min;
  };
  prefill_int("sparse_prefill_dense_layers", &SP::dense_layers, "sparse prefill: the first N layers stay dense", 0);
  prefill_int("sparse_prefill_min_tokens", &SP::min_tokens,
              "sparse prefill: chunks whose context (prefix + chunk) is shorter stay dense", 1);
  {
    EngineOption& o = add(bound("sparse_prefill_block_size", "sparse_prefill", &EngineConfig::sparse_prefill,
                                &SP::block_size, "sparse prefill: tokens per query block and per key block of the pattern"));
    o.min = 1;
    o.max = 4096;
  }
  prefill_int("sparse_prefill_stride", &SP::stride, "xattention: antidiagonal stride (divides the block size)", 1);
  prefill_int("sparse_prefill_last_q", &SP::last_q, "minference: the chunk's last queries the estimate reads", 1);
  prefill_int("sparse_prefill_vertical", &SP::vertical,
              "minference: key columns kept per query head (0: adaptive, from the threshold)", 0);
  prefill_int("sparse_prefill_slash", &SP::slash,
              "minference: diagonals kept per query head (0: adaptive, from the threshold)", 0);
  add(bound("sparse_prefill_tau", "sparse_prefill", &EngineConfig::sparse_prefill, &SP::tau,
            "flexprefill: Jensen-Shannon distance below which a head is query-aware"))
      .min = 0;
  prefill_int("sparse_prefill_min_budget", &SP::min_budget,
              "flexprefill: at least this many tokens of vertical and of slash blocks", 0);
  prefill_int("sparse_prefill_budget", &SP::budget_tokens,
              "xattention, avgpool: at most this many key tokens per query block (whole blocks, sink and diagonal "
              "included) when the threshold's choice lists more (0: no limit)",
              0);
  return t;
}

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::string EngineOption::flag() const {
  if (!cli_flags.empty()) return cli_flags.front();
  std::string f = "--" + name;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

std::string EngineOption::format(const OptionValue& v) const {
  switch (kind) {
    case Kind::kInt: return std::to_string(std::get<int64_t>(v));
    case Kind::kReal: return format_number(std::get<double>(v));
    case Kind::kFlag: return std::get<bool>(v) ? "true" : "false";
    case Kind::kText: return std::get<std::string>(v);
  }
  return {};
}

void EngineOption::check(const OptionValue& v) const {
  if (kind == Kind::kInt || kind == Kind::kReal) {
    const double x = kind == Kind::kInt ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
    const bool low = min_exclusive ? !(x > min) : !(x >= min);
    if (low || !(x <= max) || std::isnan(x)) {
      std::string range = std::isinf(max) ? std::string(min_exclusive ? "> " : ">= ") + format_number(min)
                                          : std::string("in ") + (min_exclusive ? "(" : "[") + format_number(min) +
                                                ", " + format_number(max) + "]";
      NANOVLLM_FAIL(name, " must be ", range, ", got ", format(v));
    }
  }
  if (kind == Kind::kText && choices) {
    const std::string& s = std::get<std::string>(v);
    const std::string all = choices();
    bool found = false;
    for (size_t b = 0; b <= all.size() && !found;) {
      size_t e = all.find(" | ", b);
      if (e == std::string::npos) e = all.size();
      found = all.compare(b, e - b, s) == 0 && !s.empty();
      b = e + 3;
    }
    NANOVLLM_CHECK(found, name, ": unknown value '", s, "' (choose ", all, ")");
  }
}

const std::vector<EngineOption>& engine_options() {
  static const std::vector<EngineOption> table = make_table();  // immutable once built
  return table;
}

const EngineOption* find_engine_option(std::string_view name) {
  for (const EngineOption& o : engine_options()) {
    if (o.name == name) return &o;
    for (const std::string& a : o.python_aliases)
      if (a == name) return &o;
  }
  return nullptr;
}

void check_engine_option_ranges(const EngineConfig& c) {
  for (const EngineOption& o : engine_options()) {
    if (o.name == "sparse_policy" && c.sparse.make_custom) continue;  // the caller's own policy: any name
    o.check(o.get(c));
  }
}

std::string engine_options_markdown() {
  std::string md = "| option (Python keyword) | CLI | default | what it sets |\n|---|---|---|---|\n";
  for (const EngineOption& o : engine_options()) {
    std::string cli;
    for (const std::string& f : o.cli_flags.empty() ? std::vector<std::string>{o.flag()} : o.cli_flags)
      cli += (cli.empty() ? "`" : ", `") + f + "`";
    std::string def = o.default_text.empty() ? o.format(o.default_value()) : o.default_text;
    if (o.kind == Kind::kText && def.empty()) def = "(none)";
    std::string help = o.help;
    if (o.choices) help += ": " + o.choices();
    std::string name = "`" + o.name + "`";
    for (const std::string& a : o.python_aliases) name += ", `" + a + "`";
    auto escape = [](std::string s) {
      std::string out;
      for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
      return out;
    };
    md += "| " + name + " | " + cli + " | " + escape(def) + " | " + escape(help) + " |\n";
  }
  return md;
}

}  // namespace nanovllm
