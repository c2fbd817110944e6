// One HTTP/1.x connection (Boost.Beast over Asio, everything on the server's single I/O thread). A
// request goes through: header (one deadline for the whole request line + fields, and the byte / field
// limits), the handler's early look (auth, route, size: the body is not read for a refusal), body (one
// deadline for all of it, a shorter one for any pause, the body limit for every framing, its bytes taken
// from the server-wide budget as they arrive), then the handler's reply — at once, or an Exchange the session drives while it watches the socket: a client that
// closes is noticed when its FIN arrives, not when a write fails, and its exchange is cancelled at once.
// Pipelined requests wait in the read buffer and are served in order; HTTP/1.0 clients get HTTP/1.0
// answers (a stream without chunked framing ends with the connection); HEAD gets GET's header only.
// Every connection keeps a measure of its progress (bytes in and out), so that a budget or the connection
// cap drops the one doing least with its share (least_progress below).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "nanovllm/server/http_limits.h"
#include "nanovllm/server/http_request_reader.h"
#include "nanovllm/server/http_types.h"
#include "nanovllm/server/metrics.h"

namespace nanovllm::server {

class Session;

// What the connections of one HttpServer share. I/O thread only (the metrics are atomics).
struct ConnectionContext {
  HttpHandler& handler;
  HttpLimits limits;
  size_t max_body_bytes = 0;
  Metrics& metrics;
  size_t body_budget_left = 0;                  // bytes of request bodies that may still be received at once
  std::list<std::weak_ptr<Session>> sessions;  // every session not yet destroyed, oldest first
  int open = 0;                                 // sessions not closed
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Phase { kHeader, kBody, kServing, kClosing, kClosed };
  using Clock = std::chrono::steady_clock;
  // No byte received (body) or written (a response) for this long: the connection is stalled.
  static constexpr double kStallSeconds = 1.0;
  // Stalled, or moving fewer bytes a second than this recently: the connection lags (a trickler).
  static constexpr double kLaggingBytesPerSecond = 1024;

  Session(boost::asio::ip::tcp::socket socket, ConnectionContext& ctx);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();  // registers the session and reads its first request
  void close();  // now: cancels an exchange in progress; idempotent

  Phase phase() const { return phase_; }
  Clock::time_point phase_since() const { return phase_since_; }
  // Receiving a body, or writing a response the client has not taken yet: the phases where the client
  // decides how long the connection and its buffers are held.
  bool client_paced() const { return phase_ == Phase::kBody || (phase_ == Phase::kServing && write_pending_); }
  // True when this connection has made less progress than `other` by `now`: stalled longer (see
  // kStallSeconds), or, neither stalled, a lower recent rate of bytes.
  bool less_progress_than(const Session& other, Clock::time_point now) const;
  bool lagging(Clock::time_point now) const;
  bool serving_exchange() const { return exchange_ != nullptr; }
  // A peek at the socket: true when the client has closed or reset it (pending bytes mean it has not).
  bool peer_gone();
  // The client is gone: cancels the exchange and closes.
  void client_gone();

 private:
  void set_phase(Phase p);
  void read_header();
  void on_header(const boost::beast::error_code& ec, size_t bytes);
  void read_body();
  void read_body_some();
  void on_body(const boost::beast::error_code& ec);
  // Takes `bytes` more of the body budget, dropping connections with less progress to make room.
  bool reserve_body_budget(size_t bytes);
  // `bytes` moved (in or out): the decaying rate and the last-progress time.
  void note_progress(size_t bytes);
  double stalled_seconds(Clock::time_point now) const;
  double recent_rate(Clock::time_point now) const;  // bytes/s, each byte's weight decaying over ~1 s
  void dispatch();
  void refuse(const Refusal& r);
  // Writes a whole response; `close` ends the connection after it (lingering, so the client reads it).
  void respond(HttpResponse response, bool close);
  void next_request();
  // Exchanges.
  std::function<void()> make_wake();
  void pump();
  void finish_exchange();
  void watch();
  void on_watch(const boost::beast::error_code& ec, size_t n);
  // Deadlines: one timer, re-armed per phase; a stale expiry is told apart by its generation.
  void arm(double seconds);
  void arm_until(Clock::time_point deadline);
  void disarm();
  void on_deadline(uint64_t generation);
  void linger_close();
  void drain();
  void release_body_budget();

  boost::asio::ip::tcp::socket socket_;
  ConnectionContext& ctx_;
  boost::beast::flat_buffer buffer_;
  boost::asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  std::list<std::weak_ptr<Session>>::iterator registry_entry_;
  bool registered_ = false;

  Phase phase_ = Phase::kHeader;
  Clock::time_point phase_since_ = Clock::now();
  bool closed_ = false;

  std::optional<RequestParser> parser_;
  HttpRequest request_;
  size_t body_reserved_ = 0;  // of ctx_.body_budget_left: the body bytes received so far
  Clock::time_point body_deadline_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;         // a HEAD request: its response goes without the body

  bool write_pending_ = false;  // a response write is in flight
  Clock::time_point last_progress_ = Clock::now();
  double rate_ = 0;             // recent_rate() as of rate_at_
  Clock::time_point rate_at_ = Clock::now();

  std::shared_ptr<Exchange> exchange_;
  // While an exchange runs the session may have no operation pending (nothing to write yet, the read buffer
  // full so no watch): it owns itself until the exchange ends or it closes.
  std::shared_ptr<Session> self_;
  bool writing_ = false;     // an exchange write is in flight
  bool streaming_ = false;   // a stream's head went out: errors can no longer be answered, only closed
  bool stream_ended_ = false;
  bool chunked_ = false;     // the stream in progress uses chunked framing (HTTP/1.1)
  bool watching_ = false;    // a read is pending to notice the client leave (and keep pipelined bytes)
  bool want_next_ = false;   // the watch was cancelled to read the next request
  bool peer_done_ = false;   // the client closed its side: the response in progress is the last
  size_t drained_ = 0;
};

// The connection to drop when a budget or the connection cap is reached: of those receiving a body (and,
// unless `body_only`, those writing a response: client_paced()), the one that has made the least progress,
// provided it made less than `than`, or, without `than`, provided it lags (a connection that is moving
// its bytes is not dropped for one that has not started). Null when there is none.
std::shared_ptr<Session> least_progress(const ConnectionContext& ctx, bool body_only, const Session* than);

}  // namespace nanovllm::server
