#include "nanovllm/server/engine_loop.h"

#include "nanovllm/core/logging.h"

namespace nanovllm::server {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// ---- RequestStream ----------------------------------------------------------------------------------

RequestStream::Admission RequestStream::admission() const {
  std::lock_guard<std::mutex> lock(mu_);
  return admission_;
}

ApiError RequestStream::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

RequestStream::Poll RequestStream::poll(std::vector<ChoiceEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (events_.empty() && remaining_ > 0 && timeout.count() > 0)
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  Poll p;
  p.got = !events_.empty();
  for (ChoiceEvent& e : events_) out.push_back(std::move(e));
  events_.clear();
  p.done = remaining_ == 0;
  return p;
}

void RequestStream::accept() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    admission_ = Admission::kAccepted;
    cv_.notify_all();
  }
  if (listener_) listener_();
}

void RequestStream::reject(ApiError error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    admission_ = Admission::kRejected;
    error_ = std::move(error);
    remaining_ = 0;
    cv_.notify_all();
  }
  if (listener_) listener_();
}

void RequestStream::push(ChoiceEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.finished) --remaining_;
    events_.push_back(std::move(event));
    cv_.notify_all();
  }
  if (listener_) listener_();
}

// ---- EngineLoop -------------------------------------------------------------------------------------

EngineLoop::EngineLoop(LLMEngine& engine, Metrics& metrics)
    : engine_(engine), metrics_(metrics), tokenizer_(engine.tokenizer()) {
  const LLMEngine::LoadStats s = engine_.load_stats();
  metrics_.kv_blocks_total = s.kv_blocks_total;
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::start() {
  engine_.set_delta_callback([this](const RequestDelta& d) { on_delta(d); });
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::submit(Submission submission) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) {
    submission.stream->reject(ApiError::unavailable("the server is shutting down"));
    return;
  }
  pending_.push_back(std::move(submission));
  cv_.notify_one();
}

void EngineLoop::cancel(const std::shared_ptr<RequestStream>& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(stream);
  cv_.notify_one();
}

void EngineLoop::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  abort_all_ = true;
  cv_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    abort_all_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  engine_.set_delta_callback(nullptr);
}

void EngineLoop::run() {
  while (true) {
    std::vector<Submission> subs;
    std::vector<std::shared_ptr<RequestStream>> cancels;
    bool abort_all = false, stop = false;
    {
      const bool busy = engine_.has_unfinished() || need_step_;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return busy || stop_ || abort_all_ || !pending_.empty() || !cancels_.empty(); });
      subs.swap(pending_);
      cancels.swap(cancels_);
      abort_all = std::exchange(abort_all_, false);
      stop = stop_;
    }
    for (Submission& s : subs) {
      if (stop) s.stream->reject(ApiError::unavailable("the server is shutting down"));
      else admit(s);
    }
    for (const auto& stream : cancels) {
      const auto it = ids_by_stream_.find(stream.get());
      if (it == ids_by_stream_.end()) continue;
      const std::vector<int64_t> ids = it->second;
      for (int64_t id : ids) abort_choice(id);
    }
    if (abort_all) {
      std::vector<int64_t> ids;
      for (const auto& [id, c] : choices_) ids.push_back(id);
      for (int64_t id : ids) abort_choice(id);
    }
    if (engine_.has_unfinished() || need_step_) {
      need_step_ = false;
      try {
        engine_.step();
      } catch (const std::exception& e) {
        // A bug or a device failure; the scheduler may be inconsistent for these sequences: end them all.
        NANOVLLM_ERROR("engine step failed: ", e.what(), "; aborting ", choices_.size(), " requests");
        std::vector<int64_t> ids;
        for (const auto& [id, c] : choices_) ids.push_back(id);
        for (int64_t id : ids) abort_choice(id);
      }
    }
    publish_stats();
    if (stop && choices_.empty() && !engine_.has_unfinished() && !need_step_) break;
  }
}

void EngineLoop::admit(Submission& s) {
  std::vector<int64_t> ids;
  try {
    for (const auto& prompt : s.prompts) {
      for (int64_t j = 0; j < s.n; ++j) {
        SamplingParams params = s.params;
        if (params.seed) *params.seed += static_cast<uint64_t>(j);
        const int64_t id = engine_.add_request(prompt, params);
        ids.push_back(id);
        Choice c{s.stream, static_cast<int64_t>(ids.size()) - 1, IncrementalDetokenizer(tokenizer_, true),
                 StopMatcher(s.stop), static_cast<int64_t>(prompt->size()), 0, s.arrival, {}};
        choices_.emplace(id, std::move(c));
      }
    }
  } catch (const std::exception& e) {
    for (int64_t id : ids) {
      engine_.abort_request(id);
      choices_.erase(id);
    }
    need_step_ = !ids.empty();
    s.stream->reject(ApiError::bad_request(user_message(e)));
    return;
  }
  metrics_.requests_received += 1;
  for (const auto& prompt : s.prompts) metrics_.prompt_tokens += static_cast<int64_t>(prompt->size()) * s.n;
  ids_by_stream_[s.stream.get()] = std::move(ids);
  s.stream->accept();
}

void EngineLoop::on_delta(const RequestDelta& d) {
  const auto it = choices_.find(d.request_id);
  if (it == choices_.end()) return;  // already ended here (stop string, cancel)
  Choice& c = it->second;
  ChoiceEvent ev;
  ev.index = c.index;
  ev.token_ids = d.new_token_ids;
  ev.logprobs = d.logprobs;
  if (!d.new_token_ids.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (c.num_tokens == 0) {
      c.first_token = now;
      metrics_.ttft_s.observe(seconds(now - c.arrival));
    }
    c.num_tokens += static_cast<int64_t>(d.new_token_ids.size());
    metrics_.generation_tokens += static_cast<int64_t>(d.new_token_ids.size());
  }
  ev.text = c.stop.add(c.detok.add(d.new_token_ids));
  if (c.stop.stopped()) {
    ev.finished = true;
    ev.finish_reason = FinishReason::kStop;
    finish_choice(d.request_id, std::move(ev), /*abort_in_engine=*/!d.finished);
    return;
  }
  if (d.finished) {
    ev.text += c.stop.add(c.detok.finish());
    ev.text += c.stop.flush();
    ev.finished = true;
    ev.finish_reason = c.stop.stopped() ? FinishReason::kStop : d.finish_reason;
    finish_choice(d.request_id, std::move(ev), false);
    return;
  }
  c.stream->push(std::move(ev));
}

void EngineLoop::abort_choice(int64_t id) {
  const auto it = choices_.find(id);
  if (it == choices_.end()) return;
  ChoiceEvent ev;
  ev.index = it->second.index;
  ev.text = it->second.stop.add(it->second.detok.finish());
  ev.text += it->second.stop.flush();
  ev.finished = true;
  ev.finish_reason = FinishReason::kAbort;
  finish_choice(id, std::move(ev), /*abort_in_engine=*/true);
}

void EngineLoop::finish_choice(int64_t id, ChoiceEvent event, bool abort_in_engine) {
  const auto it = choices_.find(id);
  Choice& c = it->second;
  const auto now = std::chrono::steady_clock::now();
  switch (event.finish_reason) {
    case FinishReason::kLength: metrics_.requests_finished_length += 1; break;
    case FinishReason::kAbort: metrics_.requests_finished_abort += 1; break;
    default: metrics_.requests_finished_stop += 1; break;
  }
  metrics_.e2e_latency_s.observe(seconds(now - c.arrival));
  if (c.num_tokens > 1) metrics_.tpot_s.observe(seconds(now - c.first_token) / static_cast<double>(c.num_tokens - 1));
  if (abort_in_engine) {
    // Called from on_delta (inside step(), after the scheduler's update) or between steps: either way no
    // schedule() is pending, so the abort is safe; the next step() emits it and frees its blocks.
    engine_.abort_request(id);
    need_step_ = true;
  }
  std::shared_ptr<RequestStream> stream = std::move(c.stream);
  choices_.erase(it);
  stream->push(std::move(event));
  const auto ids = ids_by_stream_.find(stream.get());
  if (ids != ids_by_stream_.end()) {
    bool any_live = false;
    for (int64_t other : ids->second) any_live |= choices_.contains(other);
    if (!any_live) ids_by_stream_.erase(ids);
  }
}

void EngineLoop::publish_stats() {
  const LLMEngine::LoadStats s = engine_.load_stats();
  metrics_.num_running = s.num_running;
  int64_t pending = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending = static_cast<int64_t>(pending_.size());
  }
  metrics_.num_waiting = s.num_waiting + pending;
  metrics_.kv_blocks_total = s.kv_blocks_total;
  metrics_.kv_blocks_used = s.kv_blocks_used;
}

}  // namespace nanovllm::server
