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
  return Slot(&in_flight, &metrics);
}

void Slot::release() {
  if (!in_flight_) return;
  *in_flight_ -= 1;
  metrics_->http_in_flight -= 1;
  in_flight_ = nullptr;
}

Generation::Generation(const GenerationEnv& env, Endpoint endpoint, std::string body, Slot slot)
    : env_(env), endpoint_(endpoint), slot_(std::move(slot)), body_(std::move(body)) {}

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
    request_ = request;
    stream_ = stream;
    env_.loop->submit(Submission{stream, request->prompts, request->params, request->n, request->stop,
                                 std::chrono::steady_clock::now()});
    return;  // the stream's listener wakes the connection when the engine admits or refuses it
  } catch (const ApiException& e) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = e.error();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = ApiError::internal(user_message(e));
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
      out.whole = HttpResponse{200, "application/json", dump_json(builder_->final_response()), {}};
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
  }
  if (!finished_) {
    env_.metrics->client_disconnects += 1;
    if (stream) env_.loop->cancel(stream);
  }
  slot_.release();
}

}  // namespace nanovllm::server
