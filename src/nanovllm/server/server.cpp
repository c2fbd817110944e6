#include "nanovllm/server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <random>
#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/engine_loop.h"
#include "nanovllm/server/response_builder.h"

namespace nanovllm::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kStreamPoll = std::chrono::milliseconds(100);  // how often an idle stream checks its client

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

// Constant-time for equal lengths: the API key must not leak through response timing.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

struct Server::Impl {
  LLMEngine& engine;
  ServerConfig config;
  Metrics metrics;
  ModelContext ctx;
  EngineLoop loop;
  httplib::Server http;
  std::thread listen_thread;
  int bound_port = 0;
  std::atomic<int> in_flight{0};  // generation requests being served
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{0};
  uint64_t id_salt = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  std::mutex shutdown_mu;
  bool shut_down = false;
  int64_t created = unix_time();

  Impl(LLMEngine& e, ServerConfig c) : engine(e), config(std::move(c)), loop(e, metrics) {
    NANOVLLM_CHECK(engine.has_tokenizer(), engine.config().model.path.string(),
                   ": the server needs the model's tokenizer.json");
    NANOVLLM_CHECK(config.max_concurrent_requests >= 1, "max_concurrent_requests must be >= 1");
    NANOVLLM_CHECK(config.max_body_bytes >= 1024, "the request body limit must be at least 1024 bytes");
    if (config.served_model_names.empty()) {
      const auto& model = engine.config().model.path;
      config.served_model_names.push_back(model.string());
      const std::string base = model.filename().empty() ? model.parent_path().filename().string()
                                                        : model.filename().string();
      if (!base.empty() && base != model.string()) config.served_model_names.push_back(base);
    }
    ctx.engine = &engine;
    ctx.served_names = config.served_model_names;
    ctx.vocab_size = engine.model_config().vocab_size;
    ctx.max_model_len = engine.config().model.max_model_len;
    ctx.limits = config.limits;
    setup_routes();
  }

  // Held for as long as a generation request is being served (a stream: until its response is released).
  struct InFlight {
    Impl* impl;
    explicit InFlight(Impl* i) : impl(i) { impl->metrics.http_in_flight += 1; }
    ~InFlight() {
      impl->metrics.http_in_flight -= 1;
      impl->in_flight -= 1;
    }
  };

  std::string new_id(Endpoint ep) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%s-%016llx", ep == Endpoint::kChat ? "chatcmpl" : "cmpl",
                  static_cast<unsigned long long>(id_salt ^ (next_id++ * 0x9E3779B97F4A7C15ull)));
    return buf;
  }

  bool is_generation_path(const std::string& path) const {
    return path == "/v1/completions" || path == "/v1/chat/completions";
  }

  void setup_routes() {
    const int threads = config.http_threads > 0 ? config.http_threads : config.max_concurrent_requests + 8;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_payload_max_length(config.max_body_bytes);
    http.set_keep_alive_timeout(2);  // an idle keep-alive connection holds a pool thread; also bounds shutdown
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!config.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
        const std::string auth = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        const bool ok = auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), config.api_key);
        if (!ok) {
          send_error(res, ApiError::unauthorized());
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (draining && (is_generation_path(req.path) || req.path == "/health")) {
        send_error(res, ApiError::unavailable("the server is shutting down"));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Every status >= 400 passes here: give the ones httplib produced itself (404, 413, ...) an OpenAI body.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request&,
                                                                       httplib::Response& res) {
      (res.status >= 500 ? metrics.http_errors_5xx : metrics.http_errors_4xx) += 1;
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, res.status == 413 ? ApiError::payload_too_large(config.max_body_bytes)
                                        : ApiError::from_status(res.status));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, ApiError::internal("internal server error"));
    });

    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(config.served_model_names.front()), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array();
      for (const std::string& name : config.served_model_names)
        data.push_back({{"id", name},
                        {"object", "model"},
                        {"created", created},
                        {"owned_by", "nanovllm"},
                        {"root", engine.config().model.path.string()},
                        {"max_model_len", engine.config().model.max_model_len}});
      res.set_content(dump_json({{"object", "list"}, {"data", data}}), "application/json");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_generation(Endpoint::kCompletions, req, res);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_generation(Endpoint::kChat, req, res);
    });
  }

  void handle_generation(Endpoint ep, const httplib::Request& req, httplib::Response& res) noexcept {
    try {
      if (in_flight.fetch_add(1) >= config.max_concurrent_requests) {
        in_flight -= 1;
        metrics.requests_rejected_429 += 1;
        send_error(res, ApiError::too_many_requests(config.max_concurrent_requests));
        return;
      }
      auto guard = std::make_shared<InFlight>(this);
      auto request = std::make_shared<GenerationRequest>(parse_generation_request(ep, req.body, ctx));
      auto stream = std::make_shared<RequestStream>(request->num_choices());
      loop.submit(Submission{stream, request->prompts, request->params, request->n, request->stop, Clock::now()});
      if (stream->wait_admission() == RequestStream::Admission::kRejected) {
        send_error(res, stream->error());
        return;
      }
      auto builder = std::make_shared<ResponseBuilder>(*request, engine.tokenizer(), new_id(ep), unix_time());
      auto st = std::make_shared<ResponseState>(ResponseState{request, stream, builder, guard});
      if (request->stream) stream_response(res, st);
      else whole_response(res, st);
    } catch (const ApiException& e) {
      send_error(res, e.error());
    } catch (const std::exception& e) {
      NANOVLLM_ERROR("request failed: ", e.what());
      send_error(res, ApiError::internal(user_message(e)));
    } catch (...) {
      send_error(res, ApiError::internal("internal server error"));
    }
  }

  // What a response's content provider keeps alive until the body is written: the request (the builder
  // refers to it), its stream, builder and in-flight guard.
  struct ResponseState {
    std::shared_ptr<GenerationRequest> request;
    std::shared_ptr<RequestStream> stream;
    std::shared_ptr<ResponseBuilder> builder;
    std::shared_ptr<InFlight> guard;
    bool started = false;  // streams: the first chunks were sent
    bool done = false;     // the whole body was written
  };

  // The content provider's releaser: a response that did not finish lost its client; cancel its request.
  std::function<void(bool)> cancel_unless_done(std::shared_ptr<ResponseState> st) {
    return [this, st](bool) noexcept {
      if (st->done) return;
      metrics.client_disconnects += 1;
      loop.cancel(st->stream);
    };
  }

  // Not streamed: the body is written once, when the request is done. It still goes through a chunked
  // content provider so a client that disconnects while it waits is noticed (is_writable() peeks EOF)
  // and its request cancelled, as for streams.
  void whole_response(httplib::Response& res, std::shared_ptr<ResponseState> st) {
    res.set_chunked_content_provider(
        "application/json",
        [st](size_t, httplib::DataSink& sink) noexcept -> bool {
          try {
            std::vector<ChoiceEvent> events;
            const RequestStream::Poll p = st->stream->poll(events, kStreamPoll);
            st->builder->add(events);
            if (!p.done) return sink.is_writable();
            const std::string body = dump_json(st->builder->final_response());
            if (!sink.write(body.data(), body.size())) return false;
            st->done = true;
            sink.done();
            return true;
          } catch (...) {
            return false;
          }
        },
        cancel_unless_done(st));
  }

  void stream_response(httplib::Response& res, std::shared_ptr<ResponseState> st) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) noexcept -> bool {
          try {
            std::string out;
            if (!st->started) {
              st->started = true;
              for (const json& c : st->builder->start_chunks()) out += sse(c);
            }
            std::vector<ChoiceEvent> events;
            const RequestStream::Poll p = st->stream->poll(events, kStreamPoll);
            for (const json& c : st->builder->chunks(events)) out += sse(c);
            if (p.done) {
              if (st->request->include_usage) out += sse(st->builder->usage_chunk());
              out += "data: [DONE]\n\n";
            }
            // A write to a client that went away fails; so does is_writable() (peeked EOF): either way the
            // provider returns false, httplib drops the connection and the releaser cancels the request.
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            if (out.empty() && !sink.is_writable()) return false;
            if (p.done) {
              st->done = true;
              sink.done();
            }
            return true;
          } catch (...) {
            return false;
          }
        },
        cancel_unless_done(st));
  }

  int start() {
    loop.start();
    bound_port = config.port == 0 ? http.bind_to_any_port(config.host)
                                  : (http.bind_to_port(config.host, config.port) ? config.port : -1);
    if (bound_port <= 0) {
      loop.stop();
      NANOVLLM_FAIL("cannot listen on ", config.host, ":", config.port, " (address in use or not available)");
    }
    listen_thread = std::thread([this] {
      if (!http.listen_after_bind()) NANOVLLM_ERROR("the HTTP listener stopped unexpectedly");
    });
    // stop() is a no-op until the accept loop runs; shutdown() may come right after start().
    for (int i = 0; i < 5000 && !http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return bound_port;
  }

  void shutdown() {
    std::lock_guard<std::mutex> lock(shutdown_mu);
    if (shut_down) return;
    shut_down = true;
    draining = true;
    const auto wait_idle = [this](double seconds) {
      const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
      while (in_flight > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    };
    if (listen_thread.joinable()) {
      wait_idle(config.shutdown_grace_s);
      loop.abort_all();  // what is left finishes with "abort"; streams end with their finish chunk + [DONE]
      wait_idle(5);
      http.stop();
      listen_thread.join();
    }
    loop.stop();
  }
};

Server::Server(LLMEngine& engine, ServerConfig config) : impl_(std::make_unique<Impl>(engine, std::move(config))) {}
Server::~Server() { shutdown(); }
int Server::start() { return impl_->start(); }
int Server::port() const { return impl_->bound_port; }
void Server::shutdown() { impl_->shutdown(); }
const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace nanovllm::server
