// nanovllm bench serve: a load generator on loopback. Starts the server in-process on a free port, runs
// --num-clients concurrent streaming clients that send --num-requests /v1/completions requests in total
// (random token-id prompts, ignore_eos, exactly --output-len tokens each), and reports request and token
// throughput plus TTFT / TPOT / latency percentiles as seen by the clients.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_options.h"
#include "option_checks.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/server.h"
#include "nanovllm/server/sse_client.h"

namespace nanovllm::cli {
namespace {

struct BenchServeOptions {
  EngineOptions engine;
  int num_clients = 16;
  int num_requests = 64;
  int input_len = 128;
  int output_len = 64;
  uint64_t seed = 0;
  std::string json_out;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

void run_bench_serve(const BenchServeOptions& o) {
  using Clock = std::chrono::steady_clock;
  LLMEngine engine(o.engine.to_config());
  server::ServerConfig sc;
  sc.port = 0;
  sc.max_concurrent_requests = std::max(256, o.num_clients);
  server::Server srv(engine, sc);
  const int port = srv.start();
  std::fprintf(stderr, "bench serve: server on 127.0.0.1:%d, %d clients, %d requests (%d in, %d out tokens)\n", port,
               o.num_clients, o.num_requests, o.input_len, o.output_len);

  const int64_t vocab = engine.model_config().vocab_size;
  std::vector<std::string> bodies;
  std::mt19937_64 rng(o.seed);
  for (int i = 0; i < o.num_requests; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(o.input_len));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(vocab, 32000)));
    bodies.push_back(nlohmann::json{{"prompt", prompt},
                                    {"max_tokens", o.output_len},
                                    {"temperature", 0},
                                    {"ignore_eos", true},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}}
                         .dump());
  }

  std::mutex mu;
  std::vector<double> ttft, tpot, latency;
  int64_t output_tokens = 0;
  int failures = 0;
  std::atomic<int> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.num_clients; ++c) {
    clients.emplace_back([&] {
      for (int i; (i = next++) < o.num_requests;) {
        const auto start = Clock::now();
        Clock::time_point first{}, last{};
        int64_t tokens = 0;
        const server::SseResult r =
            server::post_sse("127.0.0.1", port, "/v1/completions", bodies[static_cast<size_t>(i)],
                             [&](const std::string& payload) {
                               const auto j = nlohmann::json::parse(payload, nullptr, false);
                               if (j.is_object() && j.contains("usage") && j["usage"].is_object())
                                 tokens = j["usage"].value("completion_tokens", int64_t{0});
                               if (j.is_object() && !j["choices"].empty() &&
                                   !j["choices"][0].value("text", std::string()).empty()) {
                                 last = Clock::now();
                                 if (first == Clock::time_point{}) first = last;
                               }
                               return true;
                             });
        const auto end = Clock::now();
        std::lock_guard<std::mutex> lock(mu);
        if (r.status != 200 || !r.done) {
          ++failures;
          continue;
        }
        output_tokens += tokens;
        latency.push_back(std::chrono::duration<double>(end - start).count());
        if (first != Clock::time_point{}) {
          ttft.push_back(std::chrono::duration<double>(first - start).count());
          if (tokens > 1) tpot.push_back(std::chrono::duration<double>(last - first).count() / double(tokens - 1));
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  srv.shutdown();

  const int ok = static_cast<int>(latency.size());
  nlohmann::json report = {
      {"num_clients", o.num_clients}, {"num_requests", o.num_requests}, {"succeeded", ok}, {"failed", failures},
      {"input_len", o.input_len}, {"output_len", o.output_len}, {"wall_s", wall},
      {"request_throughput_per_s", ok / wall}, {"output_tokens_per_s", static_cast<double>(output_tokens) / wall},
      {"ttft_ms", {{"p50", 1e3 * percentile(ttft, 50)}, {"p90", 1e3 * percentile(ttft, 90)},
                   {"p99", 1e3 * percentile(ttft, 99)}}},
      {"tpot_ms", {{"p50", 1e3 * percentile(tpot, 50)}, {"p90", 1e3 * percentile(tpot, 90)},
                   {"p99", 1e3 * percentile(tpot, 99)}}},
      {"latency_s", {{"p50", percentile(latency, 50)}, {"p90", percentile(latency, 90)},
                     {"p99", percentile(latency, 99)}}}};
  std::printf("requests: %d ok, %d failed in %.2f s\n", ok, failures, wall);
  std::printf("throughput: %.2f req/s, %.1f output tok/s\n", ok / wall, static_cast<double>(output_tokens) / wall);
  std::printf("TTFT ms: p50 %.1f  p90 %.1f  p99 %.1f\n", 1e3 * percentile(ttft, 50), 1e3 * percentile(ttft, 90),
              1e3 * percentile(ttft, 99));
  std::printf("TPOT ms: p50 %.2f  p90 %.2f  p99 %.2f\n", 1e3 * percentile(tpot, 50), 1e3 * percentile(tpot, 90),
              1e3 * percentile(tpot, 99));
  std::printf("latency s: p50 %.3f  p90 %.3f  p99 %.3f\n", percentile(latency, 50), percentile(latency, 90),
              percentile(latency, 99));
  if (!o.json_out.empty()) std::ofstream(o.json_out) << report.dump(2) << "\n";
  NANOVLLM_CHECK(failures == 0, "bench serve: ", failures, " requests failed");
}

}  // namespace

void register_bench_serve(CLI::App& bench) {
  auto o = std::make_shared<BenchServeOptions>();
  CLI::App* cmd = bench.add_subcommand("serve", "HTTP serving load test on loopback (in-process server)");
  add_engine_options(*cmd, o->engine);
  cmd->add_option("--num-clients", o->num_clients, "concurrent streaming clients")
      ->check(in_range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--num-requests", o->num_requests, "requests in total")
      ->check(in_range(1, kMaxCount))
      ->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "prompt tokens per request")
      ->check(in_range(1, kMaxPositions))
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "generated tokens per request")
      ->check(in_range(1, kMaxPositions))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "prompt RNG seed")->capture_default_str();
  cmd->add_option("--json-out", o->json_out, "write the report as JSON");
  cmd->callback([o] {
    run_bench_serve(*o);
  });
}

}  // namespace nanovllm::cli
