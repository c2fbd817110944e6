// EngineLoop: the one thread that owns the LLMEngine (model, scheduler, KV cache). HTTP threads submit
// validated requests and cancellations through a queue; the loop admits them between steps, runs step()
// while anything is unfinished, and routes every step's tokens back by request id to the submitter's
// RequestStream, already detokenized and with stop strings applied (so a stop string ends the request
// before another step runs). No exception leaves the thread: a request the engine refuses fails its
// stream with an ApiError; an engine failure aborts the requests in flight.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/api_error.h"
#include "nanovllm/server/metrics.h"
#include "nanovllm/server/stop_matcher.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::server {

// What one step did to one choice (an n > 1 or multi-prompt request has several choices).
struct ChoiceEvent {
  int64_t index = 0;
  std::string text;                                 // new text, safe to send (stop strings held back)
  std::vector<int32_t> token_ids;                   // new tokens
  std::vector<std::vector<TokenLogprob>> logprobs;  // per new token, when asked for
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
};

// The channel between the engine thread (producer) and one HTTP request (consumer).
class RequestStream {
 public:
  explicit RequestStream(int64_t num_choices) : remaining_(num_choices) {}

  enum class Admission { kPending, kAccepted, kRejected };
  Admission admission() const;
  ApiError error() const;  // why it was rejected

  // Called (on the engine thread, no lock held) after every accept / reject / push: the consumer's wake-up.
  // Set once, before the stream is submitted.
  void set_listener(std::function<void()> listener) { listener_ = std::move(listener); }

  struct Poll {
    bool got = false;   // `out` received events
    bool done = false;  // every choice has finished and all events were taken
  };
  // Moves the pending events into `out`, waiting up to `timeout` when there are none (0: never waits).
  Poll poll(std::vector<ChoiceEvent>& out, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Engine thread side.
  void accept();
  void reject(ApiError error);
  void push(ChoiceEvent event);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Admission admission_ = Admission::kPending;
  ApiError error_;
  std::deque<ChoiceEvent> events_;
  int64_t remaining_;  // choices not finished yet
  std::function<void()> listener_;
};

struct Submission {
  std::shared_ptr<RequestStream> stream;
  // Shared, not copied: the n sequences of a prompt hold it until the engine admits them (LLMEngine::add_request).
  std::vector<std::shared_ptr<const std::vector<int32_t>>> prompts;
  SamplingParams params;
  int64_t n = 1;  // choices per prompt (seeded requests: choice j gets seed + j)
  std::vector<std::string> stop;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

class EngineLoop {
 public:
  // The engine must have a tokenizer and outlive the loop.
  EngineLoop(LLMEngine& engine, Metrics& metrics);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void start();
  // Thread-safe. The stream gets accept() or reject() from the engine thread.
  void submit(Submission submission);
  // Thread-safe: aborts the stream's unfinished choices (their KV blocks are freed); they finish with "abort".
  void cancel(const std::shared_ptr<RequestStream>& stream);
  // Thread-safe: aborts every request in flight (graceful shutdown after the grace period).
  void abort_all();
  // Aborts whatever is left and joins the thread. Idempotent.
  void stop();

 private:
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    int64_t index = 0;
    IncrementalDetokenizer detok;
    StopMatcher stop;
    int64_t prompt_tokens = 0;
    int64_t num_tokens = 0;
    std::chrono::steady_clock::time_point arrival, first_token;
  };

  void run();
  void admit(Submission& s);
  void on_delta(const RequestDelta& d);
  // Ends a choice: pushes `event` (finished) and forgets the id. `abort_in_engine`: the engine still runs it.
  void finish_choice(int64_t id, ChoiceEvent event, bool abort_in_engine);
  void abort_choice(int64_t id);
  void publish_stats();

  LLMEngine& engine_;
  Metrics& metrics_;
  const tokenizer::Tokenizer& tokenizer_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Submission> pending_;                      // guarded by mu_
  std::vector<std::shared_ptr<RequestStream>> cancels_;  // guarded by mu_
  bool abort_all_ = false;                               // guarded by mu_
  bool stop_ = false;                                    // guarded by mu_
  std::thread thread_;

  // Engine thread only.
  std::unordered_map<int64_t, Choice> choices_;  // by engine request id
  std::unordered_map<const RequestStream*, std::vector<int64_t>> ids_by_stream_;
  bool need_step_ = false;  // an abort is waiting for step() to emit it and free the sequence
};

}  // namespace nanovllm::server
