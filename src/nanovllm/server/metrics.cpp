#include "nanovllm/server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace nanovllm::server {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// append() chains rather than operator+ (g++ 12 warns falsely on `"literal" + std::string`).
void line(std::string& out, const std::string& name, const std::string& labels, double v) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(num(v)).append("\n");
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
  out.append(type).append("\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    line(out, name + "_bucket", std::string("le=\"").append(num(bounds_[i])).append("\""), static_cast<double>(cum));
  }
  line(out, name + "_bucket", "le=\"+Inf\"", static_cast<double>(count_));
  line(out, name + "_sum", "", sum_);
  line(out, name + "_count", "", static_cast<double>(count_));
}

std::string Metrics::render(const std::string& model_name) const {
  std::string out;
  auto counter = [&](const char* name, const char* help, const std::atomic<int64_t>& v) {
    header(out, name, "counter", help);
    line(out, name, "", static_cast<double>(v.load()));
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    header(out, name, "gauge", help);
    line(out, name, "", static_cast<double>(v));
  };
  header(out, "nanovllm_model_info", "gauge", "the served model");
  std::string escaped;
  for (char c : model_name) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') { escaped += "\\n"; continue; }
    escaped += c;
  }
  line(out, "nanovllm_model_info", std::string("model=\"").append(escaped).append("\""), 1);

  counter("nanovllm_requests_received_total", "generation requests accepted (after validation)", requests_received);
  header(out, "nanovllm_request_success_total", "counter", "finished choices by finish reason");
  line(out, "nanovllm_request_success_total", "finished_reason=\"stop\"", static_cast<double>(requests_finished_stop));
  line(out, "nanovllm_request_success_total", "finished_reason=\"length\"",
       static_cast<double>(requests_finished_length));
  line(out, "nanovllm_request_success_total", "finished_reason=\"abort\"",
       static_cast<double>(requests_finished_abort));
  header(out, "nanovllm_http_errors_total", "counter", "error responses by status class");
  line(out, "nanovllm_http_errors_total", "class=\"4xx\"", static_cast<double>(http_errors_4xx));
  line(out, "nanovllm_http_errors_total", "class=\"5xx\"", static_cast<double>(http_errors_5xx));
  counter("nanovllm_requests_rejected_total", "requests refused with 429 (max concurrent requests)",
          requests_rejected_429);
  counter("nanovllm_client_disconnects_total", "streams cancelled because the client went away",
          client_disconnects);
  counter("nanovllm_http_connections_dropped_total",
          "connections closed for missing a deadline mid-request or mid-write, or to make room at the cap",
          http_connections_dropped);
  counter("nanovllm_prompt_tokens_total", "prompt tokens of accepted requests (per choice)", prompt_tokens);
  counter("nanovllm_generation_tokens_total", "generated tokens", generation_tokens);
  gauge("nanovllm_num_requests_running", "sequences in the running batch", num_running);
  gauge("nanovllm_num_requests_waiting", "sequences queued (scheduler queue + submitted)", num_waiting);
  gauge("nanovllm_http_requests_in_flight", "generation HTTP requests being served", http_in_flight);
  gauge("nanovllm_http_connections_open", "open HTTP connections", http_connections_open);
  gauge("nanovllm_kv_blocks_total", "KV cache blocks", kv_blocks_total);
  gauge("nanovllm_kv_blocks_used", "KV cache blocks held by sequences", kv_blocks_used);
  gauge("nanovllm_kv_blocks_free", "KV cache blocks free (includes reusable prefix-cache blocks)",
        kv_blocks_total - kv_blocks_used);
  const int64_t total = kv_blocks_total;
  header(out, "nanovllm_kv_cache_usage_perc", "gauge", "fraction of KV blocks used");
  line(out, "nanovllm_kv_cache_usage_perc", "", total > 0 ? static_cast<double>(kv_blocks_used) / total : 0.0);
  ttft_s.render(out, "nanovllm_time_to_first_token_seconds", "time from request arrival to its first token");
  tpot_s.render(out, "nanovllm_time_per_output_token_seconds", "mean time between output tokens, per request");
  e2e_latency_s.render(out, "nanovllm_e2e_request_latency_seconds", "request latency, arrival to finish");
  return out;
}

}  // namespace nanovllm::server
