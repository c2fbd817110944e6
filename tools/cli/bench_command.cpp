// nanovllm bench throughput | latency — the engine's speed next to the card's roofline, measured in the
// same run (copy bandwidth and bf16 GEMM rate), with the workload's bytes and FLOPs counted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "bench_cost.h"
#include "commands.h"
#include "engine_options.h"
#include "option_checks.h"
#include "text_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/runner/device_peaks.h"
#include "nanovllm/runner/model_runner.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"

namespace nanovllm::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void print_peaks(const DevicePeaks& p, nlohmann::json& report) {
  if (!p.measured) {
    std::printf("device: cpu backend (no roofline)\n");
    return;
  }
  std::printf("device: %s, %.0f GiB | measured: HBM copy %.0f GB/s, H2D %.1f GB/s, D2H %.1f GB/s, bf16 GEMM %.0f TFLOP/s\n",
              p.device_name.c_str(), p.memory_gib, p.copy_gbps, p.h2d_gbps, p.d2h_gbps, p.gemm_tflops);
  report["device"] = {{"name", p.device_name},   {"memory_gib", p.memory_gib}, {"copy_gbps", p.copy_gbps},
                      {"h2d_gbps", p.h2d_gbps},  {"d2h_gbps", p.d2h_gbps},     {"gemm_tflops", p.gemm_tflops}};
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(vocab, 150000)));
  return p;
}

void write_report(const std::string& path, const nlohmann::json& report) {
  if (path.empty()) return;
  std::ofstream f(path);
  NANOVLLM_CHECK(f.good(), "cannot write ", path);
  f << report.dump(2) << "\n";
}

struct ThroughputOptions {
  EngineOptions engine;
  int64_t num_seqs = 256, min_input = 100, max_input = 1024, min_output = 100, max_output = 1024;
  uint64_t seed = 0;
  float temperature = 0.6f;
  std::string json_out;
  std::string dump_workload;  // write prompts + output lengths as JSON (for scripts/hf_bench_throughput.py)
  std::string json_schema;    // every request constrained by this JSON Schema file (structured outputs)
};

// The nano-vLLM workload: num_seqs random prompts, lengths uniform in [min, max], ignore_eos.
void run_throughput(const ThroughputOptions& o) {
  nlohmann::json report;
  const DevicePeaks peaks = measure_device_peaks();
  print_peaks(peaks, report);
  EngineConfig ec = o.engine.to_config();
  LLM llm(ec);
  const ModelConfig& mc = llm.engine().model_config();
  std::mt19937_64 rng(o.seed);
  // Structured outputs: the compile and the masks are part of what is measured (a schema the random model
  // cannot finish in --max-output tokens keeps the output lengths those of the unconstrained run).
  const std::string schema = o.json_schema.empty() ? std::string() : read_text_file(o.json_schema, "--json-schema");
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  std::vector<int64_t> in_lens, out_lens;
  for (int64_t i = 0; i < o.num_seqs; ++i) {
    const int64_t in = o.min_input + static_cast<int64_t>(rng() % static_cast<uint64_t>(o.max_input - o.min_input + 1));
    const int64_t out = o.min_output + static_cast<int64_t>(rng() % static_cast<uint64_t>(o.max_output - o.min_output + 1));
    prompts.push_back(random_tokens(rng, in, mc.vocab_size));
    SamplingParams sp;
    sp.temperature = o.temperature;
    sp.ignore_eos = true;
    sp.max_tokens = out;
    sp.seed = rng();
    if (!schema.empty()) {
      sp.structured_outputs = StructuredOutputsParams{};
      sp.structured_outputs->json = schema;
    }
    params.push_back(sp);
    in_lens.push_back(in);
    out_lens.push_back(out);
  }
  if (!o.dump_workload.empty()) {
    write_report(o.dump_workload, {{"prompts", prompts}, {"output_lens", out_lens}, {"temperature", o.temperature}});
  }
  // Warm-up (algorithm selection, workspaces, graphs) on a small request.
  SamplingParams warm_up;
  warm_up.max_tokens = 8;
  warm_up.structured_outputs = params.front().structured_outputs;  // the schema compiled before the clock runs
  llm.generate({random_tokens(rng, 64, mc.vocab_size)}, warm_up);

  const LLMEngine::StepStats before = llm.engine().step_stats();
  const auto t0 = Clock::now();
  const auto outputs = llm.generate(prompts, params);
  const double seconds = seconds_since(t0);
  LLMEngine::StepStats st = llm.engine().step_stats();
  st.schedule_s -= before.schedule_s;
  st.prefill_steps_s -= before.prefill_steps_s;
  st.decode_steps_s -= before.decode_steps_s;
  st.prefill_steps -= before.prefill_steps;
  st.decode_steps -= before.decode_steps;
  std::printf("time split: scheduler %.2f s | %lld steps with prefill %.2f s | %lld decode-only steps %.2f s (%.2f ms/step)\n",
              st.schedule_s, static_cast<long long>(st.prefill_steps), st.prefill_steps_s,
              static_cast<long long>(st.decode_steps), st.decode_steps_s,
              st.decode_steps ? 1e3 * st.decode_steps_s / static_cast<double>(st.decode_steps) : 0.0);
  report["time_split"] = {{"scheduler_s", st.schedule_s}, {"prefill_steps", st.prefill_steps},
                          {"prefill_steps_s", st.prefill_steps_s}, {"decode_steps", st.decode_steps},
                          {"decode_steps_s", st.decode_steps_s}};
  int64_t total_in = 0, total_out = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    total_in += static_cast<int64_t>(outputs[i].prompt_token_ids.size());
    total_out += static_cast<int64_t>(outputs[i].token_ids.size());
  }
  std::printf("throughput: %lld seqs, %lld prompt + %lld output tokens in %.2f s: %.0f output tok/s, %.0f total tok/s\n",
              static_cast<long long>(o.num_seqs), static_cast<long long>(total_in), static_cast<long long>(total_out),
              seconds, total_out / seconds, (total_in + total_out) / seconds);
  report["workload"] = {{"num_seqs", o.num_seqs}, {"prompt_tokens", total_in}, {"output_tokens", total_out},
                        {"input_range", {o.min_input, o.max_input}}, {"output_range", {o.min_output, o.max_output}},
                        {"temperature", o.temperature}, {"seed", o.seed}, {"json_schema", o.json_schema}};
  report["result"] = {{"seconds", seconds}, {"output_tok_s", total_out / seconds},
                      {"total_tok_s", (total_in + total_out) / seconds}};

  if (peaks.measured) {
    // Floor: prefill FLOP-bound at the GEMM rate; each decode step k bound by max(bytes, FLOPs) with
    // n_k sequences alive (those with output length > k) reading weights once and their KV once.
    const ModelCost cost(mc, projection_weight_bytes(mc, ec), ec.parallel.tensor_parallel_size);
    // A large D2D copy moves (read + write) bytes at the HBM rate; streaming reads run at about that rate.
    const double bw = peaks.copy_gbps * 1e9;
    const double flops_rate = peaks.gemm_tflops * 1e12;
    double prefill_s = 0, decode_s = 0, bytes = 0, flops = 0;
    for (int64_t in : in_lens) {
      const double f = cost.linear_flops(static_cast<double>(in), 1) + cost.prefill_attn_flops(static_cast<double>(in));
      prefill_s += f / flops_rate;
      flops += f;
    }
    const int64_t max_out = *std::max_element(out_lens.begin(), out_lens.end());
    for (int64_t k = 1; k < max_out; ++k) {
      double alive = 0, ctx = 0;
      for (size_t i = 0; i < out_lens.size(); ++i)
        if (out_lens[i] > k) alive += 1, ctx += static_cast<double>(in_lens[i] + k);
      const double step_bytes = cost.weight_bytes_per_step(alive) + cost.kv_bytes_per_token * ctx;
      const double step_flops = cost.linear_flops(alive, alive) + cost.attn_flops_per_ctx * ctx;
      decode_s += std::max(step_bytes / bw, step_flops / flops_rate);
      bytes += step_bytes;
      flops += step_flops;
    }
    const double floor_s = prefill_s + decode_s;
    std::printf("roofline floor: %.2f s (prefill %.2f s FLOP-bound, decode %.2f s) = %.0f output tok/s; achieved %.1f%% "
                "[%.2f TB read, %.1f PFLOP]\n",
                floor_s, prefill_s, decode_s, total_out / floor_s, 100 * floor_s / seconds, bytes / 1e12, flops / 1e15);
    report["roofline"] = {{"floor_seconds", floor_s}, {"floor_output_tok_s", total_out / floor_s},
                          {"achieved_fraction", floor_s / seconds}, {"bytes", bytes}, {"flops", flops},
                          {"read_bandwidth_gbps", bw / 1e9}};
  }
  write_report(o.json_out, report);
}

struct LatencyOptions {
  EngineOptions engine;
  int64_t context = 1024;
  int64_t decode_tokens = 128;
  int64_t batch = 1;  // sequences decoding together, each at `context`
  std::vector<int64_t> prefill_lens{1024, 8192, 32768};
  bool skip_prefill = false;
  std::string json_out;
};

// Decode ms/step of `batch` sequences at a context length (bs=1 by default); prefill tok/s of single prompts.
void run_latency(LatencyOptions o) {
  nlohmann::json report;
  const DevicePeaks peaks = measure_device_peaks();
  print_peaks(peaks, report);
  const int64_t longest =
      o.skip_prefill ? o.context : std::max(o.context, *std::max_element(o.prefill_lens.begin(), o.prefill_lens.end()));
  EngineConfig ec = o.engine.to_config();
  ec.scheduler.max_num_batched_tokens = std::max(ec.scheduler.max_num_batched_tokens, longest);
  ec.scheduler.max_num_seqs = std::min<int64_t>(ec.scheduler.max_num_seqs, std::max<int64_t>(8, o.batch));
  ec.cache.enable_prefix_caching = false;  // every run must compute its prompt
  if (ec.model.max_model_len == 0) ec.model.max_model_len = longest + o.decode_tokens + 16;
  LLMEngine engine(ec);
  const ModelConfig& mc = engine.model_config();
  const ModelCost cost(mc, projection_weight_bytes(mc, ec), ec.parallel.tensor_parallel_size);
  std::mt19937_64 rng(1);
  const double bw = peaks.copy_gbps * 1e9;
  const double flops_rate = peaks.gemm_tflops * 1e12;

  // Runs `count` prompts of prompt_len together; step_times gets every step's wall time and
  // decode_times the decode-only steps after the last step with prefill tokens (all sequences running).
  auto run_batch = [&](int64_t count, int64_t prompt_len, int64_t max_tokens, std::vector<double>& step_times,
                       std::vector<double>& decode_times) {
    SamplingParams sp;
    sp.temperature = 0;
    sp.ignore_eos = true;
    sp.max_tokens = max_tokens;
    for (int64_t i = 0; i < count; ++i) engine.add_request(random_tokens(rng, prompt_len, mc.vocab_size), sp);
    step_times.clear();
    decode_times.clear();
    while (engine.has_unfinished()) {
      const int64_t prefill_steps = engine.step_stats().prefill_steps;
      const auto t = Clock::now();
      engine.step();
      const double s = seconds_since(t);
      step_times.push_back(s);
      if (engine.step_stats().prefill_steps != prefill_steps) decode_times.clear();
      else decode_times.push_back(s);
    }
  };
  std::vector<double> times, decode;
  run_batch(1, 64, 4, times, decode);  // warm-up

  // Decode at `context`: the first steps are the prefills, the rest are decodes.
  run_batch(o.batch, o.context, o.decode_tokens + 1, times, decode);
  NANOVLLM_CHECK(!decode.empty(), "bench latency: no decode step ran after the prefills");
  std::sort(decode.begin(), decode.end());
  const double median_ms = 1e3 * decode[decode.size() / 2];
  double mean_ms = 0;
  for (double t : decode) mean_ms += 1e3 * t / static_cast<double>(decode.size());
  const double batch = static_cast<double>(o.batch);
  // The bytes the step must read: weights (of a MoE model, the experts a step of this batch reads:
  // ModelCost::experts_read) and every sequence's KV.
  const double floor_ms = peaks.measured
      ? 1e3 * (cost.weight_bytes_per_step(batch) + cost.kv_bytes_per_token * batch * static_cast<double>(o.context)) / bw
      : 0;
  std::printf("decode bs=%lld @ %lld context: %.3f ms/step median, %.3f mean (%zu steps)", static_cast<long long>(o.batch),
              static_cast<long long>(o.context), median_ms, mean_ms, decode.size());
  if (peaks.measured) {
    std::printf(" | weight+KV read floor %.3f ms", floor_ms);
    if (ec.parallel.tensor_parallel_size > 1)
      std::printf(" (one GPU's share of %lld)", static_cast<long long>(ec.parallel.tensor_parallel_size));
    std::printf(" -> %.2fx the floor", median_ms / floor_ms);
    if (mc.moe.enabled())
      std::printf(" (%.1f of %lld experts per MoE layer, %.2f GB per step)", cost.experts_read(batch),
                  static_cast<long long>(mc.moe.num_experts), floor_ms * 1e-3 * bw / 1e9);
  }
  std::printf("\n");
  report["decode"] = {{"batch", o.batch},           {"context", o.context}, {"tokens", decode.size()},
                      {"median_ms", median_ms},     {"mean_ms", mean_ms},   {"floor_ms", floor_ms},
                      {"weight_bytes", cost.weight_bytes_per_step(batch)},
                      {"sparse_policy", ec.sparse.policy}, {"sparse_budget", ec.sparse.budget_tokens}};

  if (o.skip_prefill) {
    write_report(o.json_out, report);
    return;
  }
  report["prefill"] = nlohmann::json::array();
  for (int64_t n : o.prefill_lens) {
    run_batch(1, n, 1, times, decode);
    const double s = times.front();
    const double flops = cost.linear_flops(static_cast<double>(n), 1) + cost.prefill_attn_flops(static_cast<double>(n));
    std::printf("prefill %lld tokens: %.1f ms, %.0f tok/s, %.0f TFLOP/s (attention counted)", static_cast<long long>(n),
                s * 1e3, n / s, flops / s / 1e12);
    if (peaks.measured) std::printf(" = %.1f%% of the measured GEMM rate", 100 * flops / s / flops_rate);
    std::printf("\n");
    report["prefill"].push_back({{"tokens", n}, {"ms", s * 1e3}, {"tok_s", n / s}, {"tflops", flops / s / 1e12},
                                 {"sparse_prefill_policy", sparse_prefill_policy_name(ec.sparse_prefill.policy)}});
    if (const auto sp = engine.runner_stats().sparse_prefill; sp && sp->causal_blocks > 0)
      report["prefill"].back()["sparse_prefill_density_so_far"] = sp->density();
  }
  write_report(o.json_out, report);
}

}  // namespace

void register_bench_engine(CLI::App& app) {
  CLI::App* bench = &app;

  auto t = std::make_shared<ThroughputOptions>();
  CLI::App* tp = bench->add_subcommand("throughput", "offline throughput on the nano-vLLM workload");
  add_engine_options(*tp, t->engine);
  tp->add_option("--num-seqs", t->num_seqs)->check(in_range(1, kMaxCount))->capture_default_str();
  tp->add_option("--min-input", t->min_input)->check(in_range(1, kMaxPositions))->capture_default_str();
  tp->add_option("--max-input", t->max_input)->check(in_range(1, kMaxPositions))->capture_default_str();
  tp->add_option("--min-output", t->min_output)->check(in_range(1, kMaxPositions))->capture_default_str();
  tp->add_option("--max-output", t->max_output)->check(in_range(1, kMaxPositions))->capture_default_str();
  tp->add_option("--seed", t->seed)->capture_default_str();
  tp->add_option("--temperature", t->temperature)->check(at_least(0))->capture_default_str();
  tp->add_option("--json-out", t->json_out, "write the report as JSON");
  tp->add_option("--dump-workload", t->dump_workload, "write the workload (prompts, output lengths) as JSON");
  tp->add_option("--json-schema", t->json_schema,
                 "constrain every request to this JSON Schema file (structured outputs; the masks' cost is measured)");
  tp->callback([t] {
    NANOVLLM_CHECK(t->min_input <= t->max_input, "--min-input (", t->min_input, ") must be <= --max-input (",
                   t->max_input, ")");
    NANOVLLM_CHECK(t->min_output <= t->max_output, "--min-output (", t->min_output, ") must be <= --max-output (",
                   t->max_output, ")");
    run_throughput(*t);
  });

  auto l = std::make_shared<LatencyOptions>();
  CLI::App* lat = bench->add_subcommand("latency", "decode ms/step (bs=1 or --batch N) and prefill tok/s");
  add_engine_options(*lat, l->engine);
  lat->add_option("--context", l->context, "decode context length")
      ->check(in_range(1, kMaxPositions))
      ->capture_default_str();
  lat->add_option("--decode-tokens", l->decode_tokens)->check(in_range(1, kMaxPositions))->capture_default_str();
  lat->add_option("--batch", l->batch, "sequences decoding together, each at --context")
      ->check(in_range(1, kMaxCount))
      ->capture_default_str();
  lat->add_flag("--skip-prefill", l->skip_prefill, "measure decode only");
  lat->add_option("--prefill", l->prefill_lens, "prefill lengths")->delimiter(',')->check(in_range(1, kMaxPositions));
  lat->add_option("--json-out", l->json_out, "write the report as JSON");
  lat->callback([l] {
    NANOVLLM_CHECK(!l->prefill_lens.empty(), "--prefill: give at least one length");
    run_latency(*l);
  });
}

}  // namespace nanovllm::cli
