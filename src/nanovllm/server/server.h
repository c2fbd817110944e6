// nanovllm serve: an OpenAI-compatible HTTP server over one LLMEngine.
//   POST /v1/completions, POST /v1/chat/completions (JSON or SSE streaming), GET /v1/models, GET /health,
//   GET /metrics (Prometheus text).
// Threads: cpp-httplib's pool parses and validates requests and writes responses; one EngineLoop thread owns
// the engine. A handler never throws: every failure is an OpenAI-style error JSON with its status
// (400/401/404/413/429/500/503), and a bad request never disturbs the others.
//
//   nanovllm::server::Server server(engine, {.port = 0});
//   int port = server.start();   // serving on background threads
//   ...
//   server.shutdown();           // graceful: 503 for new requests, in-flight finish (or are aborted after
//                                // the grace period), listener closed, engine thread joined
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "nanovllm/server/metrics.h"
#include "nanovllm/server/protocol.h"

namespace nanovllm {
class LLMEngine;
}

namespace nanovllm::server {

struct ServerConfig {
  std::string host = "127.0.0.1";              // loopback unless asked otherwise
  int port = 8000;                             // 0: pick a free port (start() returns it)
  std::string api_key;                         // non-empty: /v1/* need "Authorization: Bearer <key>"
  std::vector<std::string> served_model_names;  // "model" values accepted; empty: the model directory path
                                                // and its last component
  size_t max_body_bytes = 8u << 20;            // larger bodies get 413
  int max_concurrent_requests = 256;           // generation requests in flight; beyond: 429
  int http_threads = 0;                        // 0: max_concurrent_requests + 8 (a streaming response holds one)
  double shutdown_grace_s = 30;                // in-flight requests get this long to finish on shutdown()
  ProtocolLimits limits;
};

class Server {
 public:
  // The engine must have a tokenizer (tokenizer.json) and outlive the server; the server's engine thread is
  // its only user until shutdown().
  Server(LLMEngine& engine, ServerConfig config);
  ~Server();  // shutdown()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and starts serving on background threads. Returns the bound port.
  // Throws nanovllm::Error when the address cannot be bound.
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
