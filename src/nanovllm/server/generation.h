// One /v1/completions or /v1/chat/completions request as an Exchange: its body is parsed and tokenized on
// the parse pool (never on the I/O thread), submitted to the engine loop, and its events turned into the
// response — one JSON body, or SSE chunks as they come. It holds the server's concurrency units, one per
// sequence (prompts x n), from arrival (one) and parsing (the rest) until it ends or is cancelled (the
// client left: the units are free at once and the engine aborts the request, freeing its KV blocks).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "nanovllm/server/api_error.h"
#include "nanovllm/server/engine_loop.h"
#include "nanovllm/server/http_types.h"
#include "nanovllm/server/metrics.h"
#include "nanovllm/server/protocol.h"
#include "nanovllm/server/response_builder.h"

namespace nanovllm::server {

// A request's share of --max-concurrent-requests, counted in sequences: one unit from try_take() (the
// request's first sequence), the rest from grow() once the body says how many. Released once, by
// release() or destruction.
class Slot {
 public:
  static std::optional<Slot> try_take(std::atomic<int>& in_flight, int limit, Metrics& metrics);
  Slot(Slot&& o) noexcept
      : in_flight_(std::exchange(o.in_flight_, nullptr)), metrics_(o.metrics_), limit_(o.limit_), units_(o.units_) {}
  Slot& operator=(Slot&&) = delete;
  Slot(const Slot&) = delete;
  ~Slot() { release(); }
  // Takes `more` units as well; false (and nothing taken) when fewer are free or it was released.
  bool grow(int64_t more);
  int limit() const { return limit_; }
  void release();

 private:
  Slot(std::atomic<int>* in_flight, Metrics* metrics, int limit)
      : in_flight_(in_flight), metrics_(metrics), limit_(limit) {}
  std::atomic<int>* in_flight_;
  Metrics* metrics_;
  int limit_;
  int units_ = 1;
};

// What every generation shares; owned by the server, outlives every Generation's work.
struct GenerationEnv {
  const ModelContext* model = nullptr;
  EngineLoop* loop = nullptr;
  Metrics* metrics = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  std::function<void(std::function<void()>)> run_parse;  // runs a job on the parse pool
  std::function<std::string(Endpoint)> new_id;           // "chatcmpl-..." / "cmpl-..."
};

class Generation final : public Exchange, public std::enable_shared_from_this<Generation> {
 public:
  Generation(const GenerationEnv& env, Endpoint endpoint, std::string body, Slot slot);

  void start(std::function<void()> wake) override;
  ExchangeOutput next() override;
  void cancel() override;

 private:
  void parse();  // on the parse pool

  const GenerationEnv& env_;
  const Endpoint endpoint_;
  std::function<void()> wake_;

  std::mutex mu_;  // the slot (grown by the parse job, released by cancel) and the parse job's results
  Slot slot_;
  std::string body_;
  std::optional<ApiError> error_;
  std::shared_ptr<GenerationRequest> request_;
  std::shared_ptr<RequestStream> stream_;
  bool cancelled_ = false;

  // I/O thread only.
  std::unique_ptr<ResponseBuilder> builder_;
  bool stream_started_ = false;
  bool finished_ = false;
};

}  // namespace nanovllm::server
