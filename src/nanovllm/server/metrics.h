// Server metrics in Prometheus text format (GET /metrics). Counters and histograms are updated by the
// engine thread and the HTTP threads (atomics / one mutex); gauges come from a snapshot the engine thread
// publishes after every loop iteration.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace nanovllm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, ascending; +Inf is implicit
  void observe(double v);
  // Appends the _bucket/_sum/_count lines of `name`.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1], per bucket (not cumulative)
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct Metrics {
  // Requests.
  std::atomic<int64_t> requests_received{0};       // generation requests that passed validation
  std::atomic<int64_t> requests_finished_stop{0};  // per choice
  std::atomic<int64_t> requests_finished_length{0};
  std::atomic<int64_t> requests_finished_abort{0};
  std::atomic<int64_t> http_errors_4xx{0};
  std::atomic<int64_t> http_errors_5xx{0};
  std::atomic<int64_t> requests_rejected_429{0};
  std::atomic<int64_t> client_disconnects{0};
  std::atomic<int64_t> http_connections_dropped{0};  // deadline missed mid-request / mid-write, or evicted
  // Tokens.
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  // Gauges (engine snapshot + HTTP side).
  std::atomic<int64_t> num_running{0};
  std::atomic<int64_t> num_waiting{0};  // scheduler queue + submitted, not yet admitted
  std::atomic<int64_t> kv_blocks_total{0};
  std::atomic<int64_t> kv_blocks_used{0};
  std::atomic<int64_t> http_in_flight{0};
  std::atomic<int64_t> http_connections_open{0};

  Histogram ttft_s{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}};
  Histogram tpot_s{{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}};
  Histogram e2e_latency_s{{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120}};

  std::string render(const std::string& model_name) const;
};

}  // namespace nanovllm::server
