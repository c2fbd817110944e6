// nanovllm serve: an OpenAI-compatible HTTP server over one LLMEngine.
//   POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming), GET /v1/models,
//   GET /v1/models/{id}, GET /health, GET /metrics (Prometheus text).
// Threads: one I/O thread runs every connection (Boost.Beast over Asio: a slow client costs a socket, never
// a thread); a small worker pool parses and tokenizes request bodies; one EngineLoop thread owns the engine.
// A handler never throws: every failure is an OpenAI-style error JSON with its status
// (400/401/404/405/408/413/429/431/500/503), and a bad request never disturbs the others.
//
//   nanovllm::server::Server server(engine, {.port = 0});
//   int port = server.start();   // serving on background threads
//   ...
//   server.shutdown();           // graceful: 503 for new requests, in-flight finish (or are aborted after
//                                // the grace period), listener closed, engine thread joined
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nanovllm/server/http_limits.h"
#include "nanovllm/server/metrics.h"
#include "nanovllm/server/protocol.h"

namespace nanovllm {
class LLMEngine;
}

namespace nanovllm::server {

struct ServerConfig {
  std::string host = "127.0.0.1";              // loopback unless asked otherwise
  int port = 8000;                             // 0: pick a free port (start() returns it)
  // Given: /v1/* need "Authorization: Bearer <key>" (an empty key is an error: it is usually an unset
  // variable, and serving without auth must be asked for by leaving the key out).
  std::optional<std::string> api_key;
  std::vector<std::string> served_model_names;  // "model" values accepted; empty: the model directory path
                                                // and its last component
  size_t max_body_bytes = 8u << 20;            // larger bodies get 413, whatever their transfer encoding
  // Sequences in flight (any value >= 1): a request takes one per prompt and choice (prompts x n); beyond:
  // 429, and a request larger than the whole limit gets 400.
  int max_concurrent_requests = 256;
  int parse_threads = 0;                       // request parsing / tokenizing; 0: the cores, 2 to 16
  double shutdown_grace_s = 30;                // in-flight requests get this long to finish on shutdown()
  ProtocolLimits limits;
  HttpLimits http;
  // Chat answers: "auto" picks the tool-call parser from the chat template (tool_parser.h), or "hermes",
  // "qwen3_coder", "none"; reasoning_parser "qwen3" splits <think> into reasoning_content ("" or "none": off).
  std::string tool_call_parser = "auto";
  std::string reasoning_parser;
};

// Why `config` exposes the model to anyone who can reach it (a non-loopback host and no API key), or ""
// when it does not. Server::start() logs it as a warning.
std::string exposure_warning(const ServerConfig& config);

class Server {
 public:
  // The engine must have a tokenizer (tokenizer.json) and outlive the server; the server's engine thread is
  // its only user until shutdown().
  Server(LLMEngine& engine, ServerConfig config);
  ~Server();  // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (exclusively: no SO_REUSEPORT, so a port in use is an error, not a shared port) and
  // starts serving on background threads. Returns the bound port. Throws nanovllm::Error when the address
  // cannot be bound.
  int start();
  int port() const;
  // Graceful shutdown (thread-safe, idempotent; returns when everything has stopped).
  void shutdown();
  const Metrics& metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanovllm::server
