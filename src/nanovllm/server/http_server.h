// The HTTP transport: an exclusive listening socket and every connection, run by one I/O thread (Boost.Beast
// over Asio). Connections are cheap (a socket and a small buffer, no thread), capped, and evicted
// slowest-first at the cap; see http_session.h for one connection's rules. The handler (the OpenAI server)
// answers on the I/O thread and hands long work to Exchanges.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "nanovllm/server/http_limits.h"
#include "nanovllm/server/http_types.h"
#include "nanovllm/server/metrics.h"

namespace nanovllm::server {

class HttpServer {
 public:
  // `handler` and `metrics` must outlive the server.
  HttpServer(HttpHandler& handler, const HttpLimits& limits, size_t max_body_bytes, Metrics& metrics);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port with SO_REUSEADDR only (a restart may take a port whose old connections sit in
  // TIME_WAIT) and never SO_REUSEPORT, so a port that another server listens on is an error here instead of
  // a silently shared port. Port 0 picks a free one. Returns the bound port; throws nanovllm::Error.
  int listen(const std::string& host, int port);
  void start();  // the I/O thread begins accepting
  // Closes the listener and every connection (their exchanges are cancelled) and joins the I/O thread;
  // idempotent. Nothing of the transport is left afterwards.
  void stop();

  // I/O thread only: closes the connections whose exchange's client has already gone (a FIN or reset is
  // waiting on the socket) and returns how many. Called before a request is refused for lack of a slot, so a
  // client that hung up and reconnected at once never finds its own old request holding the slot.
  int reap_gone_clients();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanovllm::server
