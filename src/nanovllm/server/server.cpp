#include "nanovllm/server/server.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/engine_loop.h"
#include "nanovllm/server/generation.h"
#include "nanovllm/server/http_server.h"
#include "nanovllm/server/tool_parser.h"

namespace nanovllm::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Constant-time for equal lengths: the API key must not leak through response timing.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

// "%2F" -> "/": model ids are path names, and clients encode them in /v1/models/{id}. Nullopt when malformed.
std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return std::nullopt;
    out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

int parse_threads(int configured) {
  if (configured > 0) return configured;
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 2, 16);
}

enum class Route { kNone, kHealth, kMetrics, kModels, kModel, kCompletions, kChat };
constexpr std::string_view kModelPrefix = "/v1/models/";

Route route_of(const std::string& path) {
  if (path == "/health") return Route::kHealth;
  if (path == "/metrics") return Route::kMetrics;
  if (path == "/v1/models") return Route::kModels;
  if (path.size() > kModelPrefix.size() && path.rfind(kModelPrefix, 0) == 0) return Route::kModel;
  if (path == "/v1/completions") return Route::kCompletions;
  if (path == "/v1/chat/completions") return Route::kChat;
  return Route::kNone;
}

bool is_generation(Route r) { return r == Route::kCompletions || r == Route::kChat; }

// Whether `host` is reachable from this machine only: a loopback address, or "localhost".
bool is_loopback(const std::string& host) {
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(h, ec);
  return !ec && address.is_loopback();
}

HttpResponse json_response(const json& j) { return {200, "application/json", dump_json(j), {}}; }

// --tool-call-parser: a name, or "auto": the format the chat template writes tool calls in.
ToolParserKind resolve_tool_parser(const LLMEngine& engine, const std::string& name) {
  if (name != "auto") {
    const std::optional<ToolParserKind> kind = tool_parser_from_name(name);
    NANOVLLM_CHECK(kind.has_value(), "--tool-call-parser must be auto, hermes, qwen3_coder or none, got '", name, "'");
    return *kind;
  }
  try {
    return tool_parser_for_template(engine.chat_template().source());
  } catch (const Error&) {
    return ToolParserKind::kNone;  // no chat template: no chat tool calls to parse
  }
}

}  // namespace

struct Server::Impl final : HttpHandler {
  LLMEngine& engine;
  ServerConfig config;
  Metrics metrics;
  ModelContext ctx;
  EngineLoop loop;
  std::atomic<int> in_flight{0};  // generation requests being served (slots taken)
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{0};
  uint64_t id_salt = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  int64_t created = unix_time();
  Clock::time_point last_reap{};  // take_slot's last look for gone clients
  boost::asio::thread_pool parse_pool;
  GenerationEnv env;
  // Destroyed before the members above, so no connection outlives what its exchanges use (shutdown(),
  // which ~Server calls, has stopped it already).
  HttpServer http;
  std::mutex shutdown_mu;
  bool started = false;
  bool shut_down = false;
  int bound_port = 0;

  Impl(LLMEngine& e, ServerConfig c)
      : engine(e), config(std::move(c)), loop(e, metrics), parse_pool(static_cast<size_t>(parse_threads(config.parse_threads))),
        http(*this, config.http, config.max_body_bytes, metrics) {
    NANOVLLM_CHECK(engine.has_tokenizer(), engine.config().model.path.string(),
                   ": the server needs the model's tokenizer.json");
    NANOVLLM_CHECK(!config.api_key || !config.api_key->empty(),
                   "the API key is empty (an unset variable?): give a key, or leave --api-key out to serve "
                   "without one");
    NANOVLLM_CHECK(config.max_concurrent_requests >= 1, "max_concurrent_requests must be >= 1");
    NANOVLLM_CHECK(config.limits.max_request_prompt_tokens >= 1, "max_request_prompt_tokens must be >= 1");
    NANOVLLM_CHECK(config.limits.max_request_output_tokens >= 1, "max_request_output_tokens must be >= 1");
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
    ctx.tool_parser = resolve_tool_parser(engine, config.tool_call_parser);
    NANOVLLM_CHECK(config.reasoning_parser.empty() || config.reasoning_parser == "none" || config.reasoning_parser == "qwen3",
                   "--reasoning-parser must be qwen3 or none, got '", config.reasoning_parser, "'");
    ctx.reasoning_parser = config.reasoning_parser == "qwen3";
    env.model = &ctx;
    env.loop = &loop;
    env.metrics = &metrics;
    env.tokenizer = &engine.tokenizer();
    env.run_parse = [this](std::function<void()> job) { boost::asio::post(parse_pool, std::move(job)); };
    env.new_id = [this](Endpoint ep) { return new_id(ep); };
  }

  std::string new_id(Endpoint ep) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%s-%016llx", ep == Endpoint::kChat ? "chatcmpl" : "cmpl",
                  static_cast<unsigned long long>(id_salt ^ (next_id++ * 0x9E3779B97F4A7C15ull)));
    return buf;
  }

  json model_card(const std::string& name) const {
    return {{"id", name},
            {"object", "model"},
            {"created", created},
            {"owned_by", "nanovllm"},
            {"root", engine.config().model.path.string()},
            {"max_model_len", engine.config().model.max_model_len}};
  }

  // ---- HttpHandler (I/O thread) ----

  std::optional<HttpResponse> on_header(const HttpRequest& req) override {
    try {
      return check_header(req);
    } catch (const std::exception& e) {
      return ApiError::internal(user_message(e)).response();
    }
  }

  std::optional<HttpResponse> check_header(const HttpRequest& req) const {
    const Route route = route_of(req.path);
    if (config.api_key && req.path.rfind("/v1/", 0) == 0) {
      const std::string auth = req.header("authorization");
      const std::string prefix = "Bearer ";
      if (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), *config.api_key))
        return ApiError::unauthorized().response();
    }
    if (route == Route::kNone) return ApiError::not_found("no such endpoint").response();
    // HEAD is served wherever GET is (RFC 9110 9.3.2): the connection sends the header only.
    const bool allowed = is_generation(route) ? req.method == "POST" : req.method == "GET" || req.method == "HEAD";
    if (!allowed) {
      HttpResponse r = ApiError::from_status(405, req.method + " is not allowed on " + req.path).response();
      r.headers.emplace_back("Allow", is_generation(route) ? "POST" : "GET, HEAD");
      return r;
    }
    if (draining && (is_generation(route) || route == Route::kHealth))
      return ApiError::unavailable("the server is shutting down").response();
    return std::nullopt;
  }

  Reply on_request(HttpRequest&& req) override {
    try {
      switch (route_of(req.path)) {
        case Route::kHealth: return {HttpResponse{200, "application/json", "{\"status\":\"ok\"}", {}}, nullptr};
        case Route::kMetrics:
          return {HttpResponse{200, "text/plain; version=0.0.4", metrics.render(config.served_model_names.front()), {}},
                  nullptr};
        case Route::kModels: {
          json data = json::array();
          for (const std::string& name : config.served_model_names) data.push_back(model_card(name));
          return {json_response({{"object", "list"}, {"data", data}}), nullptr};
        }
        case Route::kModel: {
          const auto id = percent_decode(std::string_view(req.path).substr(kModelPrefix.size()));
          for (const std::string& name : config.served_model_names)
            if (id && *id == name) return {json_response(model_card(name)), nullptr};
          return {ApiError::not_found("The model '" + id.value_or(req.path) + "' does not exist.", "model_not_found")
                      .response(),
                  nullptr};
        }
        case Route::kCompletions: return generation(Endpoint::kCompletions, std::move(req));
        case Route::kChat: return generation(Endpoint::kChat, std::move(req));
        case Route::kNone: break;
      }
      return {ApiError::not_found("no such endpoint").response(), nullptr};
    } catch (const std::exception& e) {
      NANOVLLM_ERROR("request failed: ", e.what());
      return {ApiError::internal(user_message(e)).response(), nullptr};
    }
  }

  Reply generation(Endpoint ep, HttpRequest&& req) {
    if (draining) return {ApiError::unavailable("the server is shutting down").response(), nullptr};
    std::optional<Slot> slot = take_slot();
    if (!slot) {
      metrics.requests_rejected_429 += 1;
      return {ApiError::too_many_requests(config.max_concurrent_requests).response(), nullptr};
    }
    return {std::nullopt, std::make_shared<Generation>(env, ep, std::move(req.body), std::move(*slot))};
  }

  // A client that hung up may still hold a slot until its FIN is read; look for such before refusing, at
  // most every 100 ms: a look costs a recv(MSG_PEEK) per serving connection on the I/O thread (the only
  // caller), and an overloaded server refuses many requests in a row.
  std::optional<Slot> take_slot() {
    if (auto slot = Slot::try_take(in_flight, config.max_concurrent_requests, metrics)) return slot;
    const Clock::time_point now = Clock::now();
    if (now - last_reap < std::chrono::milliseconds(100)) return std::nullopt;
    last_reap = now;
    if (http.reap_gone_clients() == 0) return std::nullopt;
    return Slot::try_take(in_flight, config.max_concurrent_requests, metrics);
  }

  // ---- lifecycle ----

  int start() {
    bound_port = http.listen(config.host, config.port);  // throws before anything else has started
    if (const std::string warning = exposure_warning(config); !warning.empty()) NANOVLLM_WARN(warning);
    loop.start();
    http.start();
    started = true;
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
    if (started) {
      wait_idle(config.shutdown_grace_s);
      loop.abort_all();  // what is left finishes with "abort"; streams end with their finish chunk + [DONE]
      wait_idle(5);
    }
    // Producers first, the connections last: parse jobs and the engine thread wake exchanges by posting
    // to the HTTP server's io_context, which http.stop() destroys.
    parse_pool.join();
    loop.stop();
    http.stop();
  }
};

std::string exposure_warning(const ServerConfig& config) {
  if (config.api_key || is_loopback(config.host)) return {};
  return "listening on " + config.host +
         " without an API key: anyone who can reach this port can use the model (give --api-key KEY, or "
         "--host 127.0.0.1 to serve this machine only)";
}

Server::Server(LLMEngine& engine, ServerConfig config) : impl_(std::make_unique<Impl>(engine, std::move(config))) {}
Server::~Server() { shutdown(); }
int Server::start() { return impl_->start(); }
int Server::port() const { return impl_->bound_port; }
void Server::shutdown() { impl_->shutdown(); }
const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace nanovllm::server
