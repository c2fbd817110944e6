#include "nanovllm/server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/server/api_error.h"
#include "nanovllm/server/http_session.h"

namespace nanovllm::server {
namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// The configured cap, kept under the descriptor limit (with room for the model files, the engine, the
// listener): past it accept() would fail with EMFILE for everyone.
int connection_cap(int configured) {
  int cap = std::max(configured, 1);
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const long room = static_cast<long>(rl.rlim_cur) - 64;
    cap = static_cast<int>(std::min<long>(cap, std::max<long>(room, 8)));
  }
  return cap;
}

size_t body_budget(const HttpLimits& limits, size_t max_body_bytes) {
  const size_t budget = limits.max_body_bytes_in_flight ? limits.max_body_bytes_in_flight : 8 * max_body_bytes;
  return std::max(budget, max_body_bytes);
}


}  // namespace

struct HttpServer::Impl {
  // Declared before the I/O context: sessions destroyed with it unregister from ctx.sessions.
  ConnectionContext ctx;
  int max_connections;
  std::optional<net::io_context> io;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
  std::thread thread;
  bool stopped = false;

  Impl(HttpHandler& handler, const HttpLimits& limits, size_t max_body_bytes, Metrics& metrics)
      : ctx{handler, limits, max_body_bytes, metrics, body_budget(limits, max_body_bytes), {}, 0},
        max_connections(connection_cap(limits.max_connections)) {
    io.emplace(1);
    acceptor.emplace(*io);
    accept_retry.emplace(*io);
  }

  int listen(const std::string& host, int port) {
    beast::error_code ec;
    tcp::endpoint endpoint;
    const auto address = net::ip::make_address(host, ec);
    if (!ec) {
      endpoint = tcp::endpoint(address, static_cast<unsigned short>(port));
    } else {
      tcp::resolver resolver(*io);
      const auto results = resolver.resolve(host, std::to_string(port), ec);
      NANOVLLM_CHECK(!ec && !results.empty(), "cannot listen on ", host, ":", port, ": ",
                     ec ? ec.message() : "no address");
      endpoint = results.begin()->endpoint();
    }
    const auto fail_if = [&](const char* step) {
      if (ec) NANOVLLM_FAIL("cannot listen on ", host, ":", port, ": ", step, ": ", ec.message());
    };
    acceptor->open(endpoint.protocol(), ec);
    fail_if("socket");
    acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
    fail_if("SO_REUSEADDR");
    acceptor->bind(endpoint, ec);
    fail_if("bind");
    acceptor->listen(net::socket_base::max_listen_connections, ec);
    fail_if("listen");
    return acceptor->local_endpoint().port();
  }

  void start() {
    accept();
    thread = std::thread([this] {
      // No exception may end the thread (and the process): log it and keep serving.
      while (true) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {
          NANOVLLM_ERROR("HTTP I/O thread: ", e.what());
        }
      }
    });
  }

  void accept() {
    acceptor->async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      if (ec) {  // EMFILE and the like: wait a moment instead of spinning on the error
        NANOVLLM_WARN("accept: ", ec.message());
        accept_retry->expires_after(std::chrono::milliseconds(50));
        accept_retry->async_wait([this](beast::error_code wec) {
          if (!wec) accept();
        });
        return;
      }
      admit(std::move(socket));
      accept();
    });
  }

  void admit(tcp::socket socket) {
    if (ctx.open >= max_connections && !evict_one()) {
      // Every connection is being served: tell this one so, without waiting on it.
      static const std::string k503 = [] {
        const std::string body = ApiError::unavailable("too many connections; retry later").body();
        return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      }();
      [[maybe_unused]] const ssize_t sent =
          ::send(socket.native_handle(), k503.data(), k503.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ctx.metrics.http_errors_5xx += 1;
      beast::error_code ec;
      socket.close(ec);
      return;
    }
    std::make_shared<Session>(std::move(socket), ctx)->start();
  }

  // Eviction order at the connection cap: a connection that is closing anyway, then the one that has
  // waited longest for its header (slow or idle keep-alive), then the body-receiving or response-writing
  // one with the least progress (least_progress); never one waiting for the engine. The shared_ptrs taken
  // here are never the last owners (each session's pending operations hold it), so no session is
  // destroyed, and unregistered, while the list is walked.
  bool evict_one() {
    std::shared_ptr<Session> closing, header;
    for (const auto& w : ctx.sessions) {
      auto s = w.lock();
      if (!s) continue;
      if (s->phase() == Session::Phase::kClosing && !closing) closing = s;
      if (s->phase() == Session::Phase::kHeader && (!header || s->phase_since() < header->phase_since()))
        header = s;
    }
    std::shared_ptr<Session> victim = closing ? closing : header ? header : least_progress(ctx, false, nullptr);
    if (!victim) return false;
    if (victim != closing) ctx.metrics.http_connections_dropped += 1;
    victim->close();
    return true;
  }

  std::vector<std::shared_ptr<Session>> sessions() const {
    std::vector<std::shared_ptr<Session>> out;
    for (const auto& w : ctx.sessions)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }

  int reap_gone_clients() {
    int n = 0;
    for (const auto& s : sessions())
      if (s->serving_exchange() && s->peer_gone()) {
        s->client_gone();
        ++n;
      }
    return n;
  }

  void stop() {
    if (stopped) return;
    stopped = true;
    if (thread.joinable()) {
      net::post(*io, [this] {
        beast::error_code ec;
        acceptor->close(ec);
        accept_retry->cancel();
        for (const auto& s : sessions()) s->close();
        io->stop();
      });
      thread.join();
    }
    // What is left (handlers of the closed connections) goes now, while the handler is alive.
    accept_retry.reset();
    acceptor.reset();
    io.reset();
  }
};

HttpServer::HttpServer(HttpHandler& handler, const HttpLimits& limits, size_t max_body_bytes, Metrics& metrics)
    : impl_(std::make_unique<Impl>(handler, limits, max_body_bytes, metrics)) {}
HttpServer::~HttpServer() { stop(); }
int HttpServer::listen(const std::string& host, int port) { return impl_->listen(host, port); }
void HttpServer::start() { impl_->start(); }
void HttpServer::stop() { impl_->stop(); }
int HttpServer::reap_gone_clients() { return impl_->reap_gone_clients(); }

}  // namespace nanovllm::server
