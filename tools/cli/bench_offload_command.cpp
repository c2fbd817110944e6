// nanovllm bench offload — long context with layer-wise CPU KV offload: prefill tok/s, decode ms/token,
// bytes moved per step, the PCIe floor (KV bytes per decode step / measured H2D rate) and the peak GPU
// memory next to its formula; then the same prompts with offload off where they fit the GPU cache. With a
// sparse policy (--sparse-policy quest) also the hot-page cache's hit rate and the selected pages' PCIe bytes.
// --concurrency N runs N requests of each length together (offload max_num_seqs N): their decode steps are
// batched, and the report adds the aggregate output tok/s of the steps that decode all N.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "bench_cost.h"
#include "commands.h"
#include "engine_options.h"
#include "option_checks.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/runner/device_peaks.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"

namespace nanovllm::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double gib(double bytes) { return bytes / (1 << 30); }

struct OffloadBenchOptions {
  EngineOptions engine;
  std::vector<int64_t> contexts{32768, 131072};
  int64_t output_len = 32;
  int64_t concurrency = 1;  // requests of each length at once
  int64_t offload_gpu_blocks = 64;  // paged GPU cache of the offload run (unused by it; small so the peak is honest)
  bool no_compare = false;
  std::string json_out;
};

std::vector<int32_t> random_prompt(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(vocab, 150000)));
  return p;
}

struct RunResult {
  double prefill_s = 0;             // until every request has its first token (host pool allocation excluded)
  std::vector<double> decode_step_s;  // the steps that decode every request (all prefills done)
};

// Requests submitted together: steps until each has its first token (the prefills, admitted one per step
// when their prompts fill the step's token budget, next to the earlier ones' decodes), then the steps that
// decode all of them, until the first finishes.
RunResult run_requests(LLMEngine& e, const std::vector<std::vector<int32_t>>& prompts, int64_t output_len,
                       bool offloaded) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = output_len;
  RunResult r;
  for (const std::vector<int32_t>& p : prompts) e.add_request(p, sp);
  const auto n = static_cast<int64_t>(prompts.size());
  auto offload = [&] { return e.runner_stats().offload->steps; };  // RunnerStats reads no device counter
  const double alloc0 = offloaded ? offload().host_alloc_s : 0;
  const int64_t generated0 = e.num_generated_tokens();
  const auto t0 = Clock::now();
  // Every request has its first token when n tokens were generated and no step decoded yet: with several
  // requests, count prefills instead (the earlier requests decode while later ones prefill).
  const int64_t prefills0 = offloaded ? offload().prefills : 0;
  auto prefilled = [&] {
    return offloaded ? offload().prefills - prefills0 >= n : e.num_generated_tokens() - generated0 >= n;
  };
  while (e.has_unfinished() && !prefilled()) e.step();
  r.prefill_s = seconds_since(t0) - (offloaded ? offload().host_alloc_s - alloc0 : 0);
  while (e.has_unfinished()) {
    const LLMEngine::LoadStats load = e.load_stats();
    const int64_t unfinished = load.num_running + load.num_waiting;
    const auto t = Clock::now();
    e.step();
    if (unfinished == n) r.decode_step_s.push_back(seconds_since(t));
  }
  return r;
}

// The sparse prefill policy's counters so far (zeros when it is dense).
SparsePrefillCounters sparse_prefill_counters(LLMEngine& e) {
  return e.runner_stats().sparse_prefill.value_or(SparsePrefillCounters{});
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_offload_bench(const OffloadBenchOptions& o) {
  nlohmann::json report;
  const DevicePeaks peaks = measure_device_peaks();
  if (peaks.measured) {
    std::printf("device: %s, %.0f GiB | measured: H2D %.1f GB/s, D2H %.1f GB/s (pinned, 256 MiB copies)\n",
                peaks.device_name.c_str(), peaks.memory_gib, peaks.h2d_gbps, peaks.d2h_gbps);
    report["device"] = {{"name", peaks.device_name}, {"h2d_gbps", peaks.h2d_gbps}, {"d2h_gbps", peaks.d2h_gbps}};
  } else {
    std::printf("device: cpu backend (host pool <-> \"device\" buffers by memcpy; no PCIe floor)\n");
  }
  const int64_t longest = *std::max_element(o.contexts.begin(), o.contexts.end());
  EngineConfig base = o.engine.to_config();
  if (base.model.max_model_len == 0) base.model.max_model_len = longest + o.output_len + 1;
  base.cache.enable_prefix_caching = false;  // every run computes its whole prompt
  std::mt19937_64 rng(7);

  // 1. Offload on: every request takes the offload path.
  EngineConfig ec = base;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.sparse_prefill.count_blocks = true;
  ec.offload.max_num_seqs = std::max(ec.offload.max_num_seqs, o.concurrency);
  ec.scheduler.max_num_seqs = std::max(ec.scheduler.max_num_seqs, o.concurrency);  // the sparse prefill's density per request (a sync per layer chunk)
  if (ec.cache.num_kv_blocks == 0) ec.cache.num_kv_blocks = o.offload_gpu_blocks;
  report["offload"] = nlohmann::json::array();
  std::vector<std::vector<int32_t>> prompts;
  {
    LLM llm(ec);
    LLMEngine& e = llm.engine();
    const ModelConfig& mc = e.model_config();
    NANOVLLM_CHECK(e.runner_stats().offload.has_value(), "bench offload: the runner has no offload path");
    auto offload = [&] { return *e.runner_stats().offload; };
    for (int64_t c : o.contexts) prompts.push_back(random_prompt(rng, c, mc.vocab_size));
    auto batch_of = [&](size_t i) {  // the first request is prompts[i] (the offload-off run's), then fresh ones
      std::vector<std::vector<int32_t>> b{prompts[i]};
      for (int64_t k = 1; k < o.concurrency; ++k) b.push_back(random_prompt(rng, o.contexts[i], mc.vocab_size));
      return b;
    };
    // Warm-up: GEMM algorithms, workspaces (and the batched decode's shapes).
    std::vector<std::vector<int32_t>> warm;
    for (int64_t i = 0; i < o.concurrency; ++i) warm.push_back(random_prompt(rng, 256, mc.vocab_size));
    run_requests(e, warm, 4, true);

    const OffloadFootprint fp = offload().footprint;
    const ModelCost cost(mc);
    const double weights = 2.0 * (cost.weight_params + cost.lm_head_params * (mc.tie_word_embeddings ? 1 : 2));
    const int64_t layers = mc.num_hidden_layers;
    const double kv_token_layer = static_cast<double>(offload().kv_bytes_per_token_per_layer);
    std::printf("offload: num_kv_buffers %lld, host block %lld tokens, max_model_len %lld, %lld layers, %.1f KiB KV per "
                "token (kv_cache_dtype %s)\n",
                static_cast<long long>(ec.offload.num_kv_buffers), static_cast<long long>(ec.offload.block_size),
                static_cast<long long>(base.model.max_model_len), static_cast<long long>(layers),
                kv_token_layer * static_cast<double>(layers) / 1024, ec.cache.kv_cache_dtype.c_str());
    for (size_t i = 0; i < o.contexts.size(); ++i) {
      const int64_t c = o.contexts[i];
      const OffloadStats s0 = offload().steps;
      const SparsePrefillCounters sp0 = sparse_prefill_counters(e);
      const PageCacheCounters pc0 = e.offload_page_cache();
      const RunResult r = run_requests(e, batch_of(i), o.output_len, true);
      const OffloadStats s1 = offload().steps;
      const SparsePrefillCounters sp = sparse_prefill_counters(e).since(sp0);
      const double steps = static_cast<double>(s1.decode_steps - s0.decode_steps);
      // Decode traffic: every step loads each layer's flushed prefix; D2H only when a host block fills.
      const double prefill_d2h = kv_token_layer * static_cast<double>(c * layers * o.concurrency);
      double h2d_step = steps > 0 ? static_cast<double>(s1.h2d_bytes - s0.h2d_bytes) / steps : 0;
      const double d2h_step = steps > 0 ? (static_cast<double>(s1.d2h_bytes - s0.d2h_bytes) - prefill_d2h) / steps : 0;
      const double ms = 1e3 * median(r.decode_step_s);
      const double prompt_tokens = static_cast<double>(c * o.concurrency);
      nlohmann::json row = {{"context", c},           {"concurrency", o.concurrency}, {"prefill_s", r.prefill_s},
                            {"prefill_tok_s", prompt_tokens / r.prefill_s},
                            {"decode_ms_median", ms}, {"decode_steps", steps},
                            {"host_alloc_s", s1.host_alloc_s - s0.host_alloc_s}};
      if (ec.sparse.enabled()) {
        // Only the cache misses cross PCIe (plus the page straddling the host pool's end, not counted):
        // a miss is one (layer, KV head, page) of page_size tokens, K and V.
        PageCacheCounters pc = e.offload_page_cache();  // since construction: this run's is the difference
        pc.hits -= pc0.hits;
        pc.misses -= pc0.misses;
        const double page_bytes = static_cast<double>(ec.cache.block_size) * kv_token_layer /
                                  static_cast<double>(mc.num_key_value_heads);
        h2d_step = steps > 0 ? static_cast<double>(pc.misses) * page_bytes / steps : 0;
        const double lookups = static_cast<double>(pc.hits + pc.misses);
        const double hit_rate = lookups > 0 ? static_cast<double>(pc.hits) / lookups : 0;
        std::printf("context %7lld: sparse %s, budget %lld tokens, pages of %lld, GPU cache %lld tokens per layer and KV "
                    "head: hit rate %.1f%%\n", static_cast<long long>(c), ec.sparse.policy.c_str(),
                    static_cast<long long>(ec.sparse.budget_tokens), static_cast<long long>(ec.cache.block_size),
                    static_cast<long long>(ec.sparse.cache_tokens()), 100 * hit_rate);
        row["sparse"] = {{"policy", ec.sparse.policy}, {"budget_tokens", ec.sparse.budget_tokens},
                         {"page_size", ec.cache.block_size}, {"gpu_cache_tokens", ec.sparse.cache_tokens()},
                         {"cache_hits", pc.hits}, {"cache_misses", pc.misses}, {"hit_rate", hit_rate}};
      }
      if (ec.sparse_prefill.enabled()) {
        std::printf("context %7lld: sparse prefill %s, threshold %.3g: %.2f%% of the causal key blocks attended in "
                    "%lld sparse layer-chunks (%lld dense)\n",
                    static_cast<long long>(c), sparse_prefill_policy_name(ec.sparse_prefill.policy),
                    ec.sparse_prefill.effective_threshold(), 100 * sp.density(),
                    static_cast<long long>(sp.sparse_layer_chunks), static_cast<long long>(sp.dense_layer_chunks));
        row["sparse_prefill"] = {{"policy", sparse_prefill_policy_name(ec.sparse_prefill.policy)},
                                 {"threshold", ec.sparse_prefill.effective_threshold()},
                                 {"density", sp.density()},
                                 {"sparse_layer_chunks", sp.sparse_layer_chunks},
                                 {"dense_layer_chunks", sp.dense_layer_chunks}};
      }
      if (o.concurrency > 1) {
        const double tok_s = ms > 0 ? 1e3 * static_cast<double>(o.concurrency) / ms : 0;
        std::printf("context %7lld x %lld requests: prefill %8.2f s = %8.0f tok/s | decode %8.2f ms/step of %lld tokens "
                    "= %.1f output tok/s (median of %zu) | per step H2D %.1f MiB, D2H %.3f MiB",
                    static_cast<long long>(c), static_cast<long long>(o.concurrency), r.prefill_s,
                    prompt_tokens / r.prefill_s, ms, static_cast<long long>(o.concurrency), tok_s,
                    r.decode_step_s.size(), h2d_step / (1 << 20), d2h_step / (1 << 20));
        row["output_tok_s"] = tok_s;
      } else {
        std::printf("context %7lld: prefill %8.2f s = %8.0f tok/s | decode %8.2f ms/token (median of %zu) | per step H2D "
                    "%.1f MiB, D2H %.3f MiB",
                    static_cast<long long>(c), r.prefill_s, prompt_tokens / r.prefill_s, ms, r.decode_step_s.size(),
                    h2d_step / (1 << 20), d2h_step / (1 << 20));
      }
      row["h2d_bytes_per_step"] = h2d_step;
      row["d2h_bytes_per_step"] = d2h_step;
      if (peaks.measured && ms > 0) {
        const double floor_ms = 1e3 * h2d_step / (peaks.h2d_gbps * 1e9);
        const double achieved_gbps = h2d_step / (ms * 1e-3) / 1e9;
        std::printf(" | PCIe floor %.2f ms -> %.2fx the floor (%.1f GB/s achieved of %.1f measured)", floor_ms,
                    ms / floor_ms, achieved_gbps, peaks.h2d_gbps);
        row["pcie_floor_ms"] = floor_ms;
        row["floor_ratio"] = ms / floor_ms;
        row["achieved_h2d_gbps"] = achieved_gbps;
      }
      std::printf("\n");
      report["offload"].push_back(row);
    }
    const double peak = static_cast<double>(peak_device_memory_bytes());
    if (peaks.measured) {
      const double paged = static_cast<double>(e.runner_stats().num_kv_blocks) * static_cast<double>(base.cache.block_size) *
                           kv_token_layer * static_cast<double>(layers);
      const double formula = weights + static_cast<double>(fp.total()) + paged;
      std::printf("peak GPU memory (nano-vLLM allocator): %.2f GiB | formula: weights %.2f + num_kv_buffers x layer KV %.2f "
                  "+ decode buffers %.2f + prefill hidden/residual %.2f + index arrays %.3f + sparse %.2f + paged cache %.2f = %.2f GiB "
                  "(+ the step workspace of max_num_batched_tokens rows, cuBLASLt/attention scratch not counted)\n",
                  gib(peak), gib(weights), gib(static_cast<double>(fp.ring)), gib(static_cast<double>(fp.decode_buffers)),
                  gib(static_cast<double>(fp.hidden)), gib(static_cast<double>(fp.metadata)),
                  gib(static_cast<double>(fp.sparse)), gib(paged), gib(formula));
      report["memory"] = {{"peak_bytes", peak},        {"weights", weights},       {"ring", fp.ring},
                          {"decode_buffers", fp.decode_buffers}, {"hidden", fp.hidden}, {"metadata", fp.metadata}, {"sparse", fp.sparse},
                          {"paged_cache", paged},      {"formula_bytes", formula}};
    }
  }

  auto write_json = [&] {
    if (o.json_out.empty()) return;
    std::ofstream f(o.json_out);
    NANOVLLM_CHECK(f.good(), "cannot write ", o.json_out);
    f << report.dump(2) << "\n";
  };
  // 2. Offload off: the same prompts on the paged GPU cache, where they fit.
  if (o.no_compare) return write_json();
  report["gpu_only"] = nlohmann::json::array();
  EngineConfig plain = base;
  plain.offload.enabled = false;
  plain.scheduler.max_num_batched_tokens = std::max(plain.scheduler.max_num_batched_tokens, longest);
  LLM llm(plain);
  LLMEngine& e = llm.engine();
  const int64_t capacity = e.runner_stats().num_kv_blocks * plain.cache.block_size;
  run_requests(e, {random_prompt(rng, 256, e.model_config().vocab_size)}, 4, false);
  for (size_t i = 0; i < o.contexts.size(); ++i) {
    const int64_t c = o.contexts[i];
    if (c + o.output_len > capacity) {
      std::printf("offload off, context %7lld: does not fit the paged GPU cache (%lld tokens)\n", static_cast<long long>(c),
                  static_cast<long long>(capacity));
      report["gpu_only"].push_back({{"context", c}, {"fits", false}});
      continue;
    }
    const RunResult r = run_requests(e, {prompts[i]}, o.output_len, false);
    const double ms = 1e3 * median(r.decode_step_s);
    std::printf("offload off, context %7lld: prefill %8.2f s = %8.0f tok/s | decode %8.2f ms/token\n",
                static_cast<long long>(c), r.prefill_s, static_cast<double>(c) / r.prefill_s, ms);
    report["gpu_only"].push_back({{"context", c}, {"fits", true}, {"prefill_s", r.prefill_s},
                                  {"prefill_tok_s", static_cast<double>(c) / r.prefill_s}, {"decode_ms_median", ms}});
  }
  write_json();
}

}  // namespace

void register_bench_offload(CLI::App& bench) {
  auto o = std::make_shared<OffloadBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("offload", "long context with layer-wise CPU KV offload vs the GPU cache");
  add_engine_options(*cmd, o->engine);
  cmd->add_option("--context", o->contexts, "prompt lengths")
      ->delimiter(',')
      ->check(in_range(1, kMaxPositions))
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "tokens generated per prompt")
      ->check(in_range(2, kMaxPositions))
      ->capture_default_str();
  cmd->add_option("--offload-gpu-blocks", o->offload_gpu_blocks,
                  "paged GPU KV blocks of the offload run (it does not use them)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency,
                  "offloaded requests of each length at once (their decode steps batched; raises the offload and "
                  "scheduler max_num_seqs to it)")
      ->check(in_range(1, kMaxCount))
      ->capture_default_str();
  cmd->add_flag("--no-compare", o->no_compare, "skip the offload-off run (one request per length)");
  cmd->add_option("--json-out", o->json_out, "write the report as JSON");
  cmd->callback([o] {
    NANOVLLM_CHECK(!o->contexts.empty(), "--context: give at least one length");
    run_offload_bench(*o);
  });
}

}  // namespace nanovllm::cli
