#include "nanovllm/server/generation.h"

#include <ctime>

namespace nanovllm::server {
namespace {

std::string sse(const nlohmann::json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace

std::optional<Slot> Slot::try_take(std::atomic<int>& in_flight, int limit, Metrics& metrics) {
  if (in_flight.fetch_add(1) >= limit) {
    in_flight -= 1;
    return std::nullopt;
  }
  metrics.http_in_flight += 1;
  return Slot(&in_flight, &metrics, limit);
}

bool Slot::grow(int64_t more) {
  if (!in_flight_ || more < 0 || more > limit_) return false;
  const int m = static_cast<int>(more);
  if (in_flight_->fetch_add(m) > limit_ - m) {
    *in_flight_ -= m;
    return false;
  }
  units_ += m;
  return true;
}

void Slot::release() {
  if (!in_flight_) return;
  *in_flight_ -= units_;
  metrics_->http_in_flight -= 1;
  in_flight_ = nullptr;
}

Generation::Generation(const GenerationEnv& env, Endpoint endpoint, std::string body, Slot slot)
    : env_(env), endpoint_(endpoint), slot_(std::move(slot)), body_(std::move(body)) {}

namespace {

// The engine's copies of a request's prompts: each aliases its prompt in `request` (shared, never copied),
// so that the n sequences of a prompt share one token vector until the engine admits them.
std::vector<std::shared_ptr<const std::vector<int32_t>>> shared_prompts(
    const std::shared_ptr<GenerationRequest>& request) {
  std::vector<std::shared_ptr<const std::vector<int32_t>>> out;
  for (const auto& prompt : request->prompts) out.emplace_back(request, &prompt);
  return out;
}

}  // namespace

void Generation::start(std::function<void()> wake) {
  wake_ = std::move(wake);
  env_.run_parse([self = shared_from_this()] { self->parse(); });
}

void Generation::parse() {
  std::string body;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    body.swap(body_);
  }
  try {
    auto request = std::make_shared<GenerationRequest>(parse_generation_request(endpoint_, body, *env_.model));
    std::string().swap(body);  // the body's memory goes now, not when the response is done
    auto stream = std::make_shared<RequestStream>(request->num_choices());
    stream->set_listener(wake_);
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    // Concurrency is counted in sequences: the rest of this request's units, now that it is known.
    const int64_t sequences = request->num_choices();
    if (sequences > slot_.limit())
      throw ApiException(ApiError::bad_request(
          "this request has " + std::to_string(sequences) + " sequences (prompts x n), more than the " +
              std::to_string(slot_.limit()) + " this server generates at once (--max-concurrent-requests)",
          "n"));
    if (!slot_.grow(sequences - 1)) throw ApiException(ApiError::too_many_requests(slot_.limit()));
    request_ = request;
    stream_ = stream;
    env_.loop->submit(Submission{stream, shared_prompts(request), request->params, request->n, request->stop,
                                 std::chrono::steady_clock::now()});
    return;  // the stream's listener wakes the connection when the engine admits or refuses it
  } catch (const ApiException& e) {
    std::lock_guard<std::mutex> lock(mu_);  // a throw above has released it with its scope
    if (e.error().status == 429) env_.metrics->requests_rejected_429 += 1;
    error_ = e.error();
    slot_.release();  // now, not when the last reference to this exchange goes
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = ApiError::internal(user_message(e));
    slot_.release();
  }
  wake_();
}

ExchangeOutput Generation::next() {
  ExchangeOutput out;
  if (finished_) return out;
  std::shared_ptr<GenerationRequest> request;
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) {
      finished_ = true;
      out.whole = error_->response();
      return out;
    }
    request = request_;
    stream = stream_;
  }
  if (!stream) return out;  // still parsing
  switch (stream->admission()) {
    case RequestStream::Admission::kPending: return out;
    case RequestStream::Admission::kRejected:
      finished_ = true;
      out.whole = stream->error().response();
      return out;
    case RequestStream::Admission::kAccepted: break;
  }
  if (!builder_)
    builder_ = std::make_unique<ResponseBuilder>(*request, *env_.tokenizer, env_.new_id(endpoint_),
                                                 static_cast<int64_t>(std::time(nullptr)));
  std::vector<ChoiceEvent> events;
  const RequestStream::Poll p = stream->poll(events);
  if (!request->stream) {
    builder_->add(events);
    if (p.done) {
      finished_ = true;
      out.whole = HttpResponse{200, "application/json", builder_->final_response(), {}};
    }
    return out;
  }
  if (!stream_started_) {
    stream_started_ = true;
    out.stream_type = "text/event-stream";
    for (const nlohmann::json& c : builder_->start_chunks()) out.data += sse(c);
  }
  for (const nlohmann::json& c : builder_->chunks(events)) out.data += sse(c);
  if (p.done) {
    if (request->include_usage) out.data += sse(builder_->usage_chunk());
    out.data += "data: [DONE]\n\n";
    out.end = true;
    finished_ = true;
  }
  return out;
}

void Generation::cancel() {
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    stream = stream_;
    slot_.release();
  }
  if (!finished_) {
    env_.metrics->client_disconnects += 1;
    if (stream) env_.loop->cancel(stream);
  }
}

}  // namespace nanovllm::server
