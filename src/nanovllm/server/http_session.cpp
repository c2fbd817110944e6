#include "nanovllm/server/http_session.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include "nanovllm/server/api_error.h"

namespace nanovllm::server {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// A connection that ends after a response (an error before the body was read, Connection: close) first
// shuts its sending side and drains what the client still sends for a moment: closing a socket with unread
// input sends a reset, which can destroy the response before the client reads it.
constexpr double kLingerSeconds = 1.0;
constexpr size_t kLingerBytes = 4u << 20;
constexpr size_t kWatchReadBytes = 4096;
// The time over which a byte's weight in a connection's recent rate decays by e.
constexpr double kRateSeconds = 1.0;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

std::string stream_head(unsigned version, const std::string& type, bool chunked, bool keep_alive) {
  std::string h = version == 10 ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.1 200 OK\r\n";
  h += "Content-Type: " + type + "\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
  if (chunked) h += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) h += "Connection: close\r\n";
  return h + "\r\n";
}

std::string chunk(const std::string& data) {
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

Session::Session(tcp::socket socket, ConnectionContext& ctx)
    : socket_(std::move(socket)), ctx_(ctx), buffer_(read_buffer_limit(ctx.limits)), timer_(socket_.get_executor()) {}

Session::~Session() {
  if (!closed_) {  // destroyed with the I/O context at shutdown
    ctx_.open -= 1;
    ctx_.metrics.http_connections_open -= 1;
    if (exchange_) exchange_->cancel();
    release_body_budget();
  }
  if (registered_) ctx_.sessions.erase(registry_entry_);
}

void Session::start() {
  registry_entry_ = ctx_.sessions.insert(ctx_.sessions.end(), weak_from_this());
  registered_ = true;
  ctx_.open += 1;
  ctx_.metrics.http_connections_open += 1;
  beast::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);  // stream chunks leave at once
  read_header();
}

void Session::set_phase(Phase p) {
  phase_ = p;
  phase_since_ = Clock::now();
}

// ---- request ----------------------------------------------------------------------------------------

void Session::read_header() {
  if (closed_) return;
  parser_.emplace();
  configure(*parser_, ctx_.limits, ctx_.max_body_bytes);
  request_ = HttpRequest{};
  head_ = false;
  set_phase(Phase::kHeader);
  arm(ctx_.limits.header_timeout_s);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_header(ec, n); });
}

void Session::on_header(const beast::error_code& ec, size_t bytes) {
  disarm();
  if (closed_) return;
  note_progress(bytes);
  if (ec) {
    if (const auto r = refusal_for(ec, false, ctx_.max_body_bytes)) refuse(*r);
    else close();
    return;
  }
  if (const auto r = check_header(*parser_, ctx_.limits)) {
    refuse(*r);
    return;
  }
  request_ = to_request(*parser_);
  version_ = request_.version;
  keep_alive_ = parser_->get().keep_alive();
  head_ = request_.method == "HEAD";
  if (auto early = ctx_.handler.on_header(request_)) {
    respond(std::move(*early), /*close=*/request_.has_body || !keep_alive_);
    return;
  }
  if (!request_.has_body) {
    dispatch();
    return;
  }
  // The body's bytes take their share of the server-wide budget as they arrive (read_body_some).
  const auto expect = parser_->get().find(http::field::expect);
  if (version_ == 11 && expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    arm(ctx_.limits.write_timeout_s);
    net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code wec, size_t) {
                       self->disarm();
                       if (self->closed_) return;
                       if (wec) self->close();
                       else self->read_body();
                     });
    return;
  }
  read_body();
}

void Session::read_body() {
  set_phase(Phase::kBody);
  last_progress_ = Clock::now();
  body_deadline_ = last_progress_ + seconds(ctx_.limits.body_timeout_s);
  read_body_some();
}

// Piece by piece, so that each piece is paid for from the budget when it arrives and a pause longer than
// the stall deadline ends the body (the whole-body deadline still holds).
void Session::read_body_some() {
  arm_until(std::min(body_deadline_, Clock::now() + seconds(ctx_.limits.body_stall_timeout_s)));
  http::async_read_some(socket_, buffer_, *parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_body(const beast::error_code& ec) {
  disarm();
  if (closed_) return;
  if (ec) {
    release_body_budget();
    if (const auto r = refusal_for(ec, true, ctx_.max_body_bytes)) refuse(*r);
    else close();
    return;
  }
  const size_t received = parser_->get().body().size();
  if (received > body_reserved_) {
    const size_t more = received - body_reserved_;
    note_progress(more);
    if (!reserve_body_budget(more)) {
      release_body_budget();
      refuse({503, "too many request bodies are arriving at once; retry later"});
      return;
    }
  }
  if (!parser_->is_done()) {
    read_body_some();
    return;
  }
  release_body_budget();
  request_.body = std::move(parser_->get().body());
  dispatch();
}

bool Session::reserve_body_budget(size_t bytes) {
  // Make room by dropping the bodies that have made less progress than this one, least first.
  while (bytes > ctx_.body_budget_left) {
    const std::shared_ptr<Session> victim = least_progress(ctx_, /*body_only=*/true, this);
    if (!victim) return false;
    ctx_.metrics.http_connections_dropped += 1;
    victim->close();
  }
  ctx_.body_budget_left -= bytes;
  body_reserved_ += bytes;
  return true;
}

void Session::dispatch() {
  parser_.reset();
  set_phase(Phase::kServing);
  HttpHandler::Reply reply = ctx_.handler.on_request(std::move(request_));
  if (reply.now || !reply.later) {
    respond(reply.now ? std::move(*reply.now) : ApiError::internal("no response").response(), !keep_alive_);
    return;
  }
  exchange_ = std::move(reply.later);
  self_ = shared_from_this();
  watch();
  exchange_->start(make_wake());
}

// ---- responses --------------------------------------------------------------------------------------

void Session::refuse(const Refusal& r) {
  keep_alive_ = false;
  respond(ApiError::from_status(r.status, r.message).response(), /*close=*/true);
}

void Session::respond(HttpResponse response, bool close) {
  if (response.status >= 400) (response.status >= 500 ? ctx_.metrics.http_errors_5xx : ctx_.metrics.http_errors_4xx) += 1;
  auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(response.status),
                                                                  version_ == 10 ? 10 : 11);
  res->set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) res->set(name, value);
  res->body() = std::move(response.body);
  res->keep_alive(!close && keep_alive_);
  res->prepare_payload();
  if (phase_ != Phase::kServing) set_phase(Phase::kServing);
  arm(ctx_.limits.write_timeout_s);
  write_pending_ = true;
  auto done = [self = shared_from_this(), res](beast::error_code ec, size_t n) {
    self->write_pending_ = false;
    self->disarm();
    if (self->closed_) return;
    self->note_progress(n);
    if (ec) self->close();
    else if (!res->keep_alive()) self->linger_close();
    else self->next_request();
  };
  if (!head_) {
    http::async_write(socket_, *res, std::move(done));
    return;
  }
  // HEAD (RFC 9110 9.3.2): GET's header, Content-Length included, and no body.
  auto serializer = std::make_shared<http::response_serializer<http::string_body>>(*res);
  http::async_write_header(socket_, *serializer,
                           [serializer, done = std::move(done)](beast::error_code ec, size_t n) { done(ec, n); });
}

void Session::next_request() {
  if (closed_) return;
  if (peer_done_) {
    close();
    return;
  }
  if (watching_) {  // its handler reads the next request (keeping any bytes it got)
    want_next_ = true;
    beast::error_code ec;
    socket_.cancel(ec);
    return;
  }
  read_header();
}

// ---- exchanges --------------------------------------------------------------------------------------

std::function<void()> Session::make_wake() {
  // Called by the engine thread per step and stream: one post at a time, cleared when it runs.
  auto pending = std::make_shared<std::atomic<bool>>(false);
  return [weak = weak_from_this(), pending, ex = socket_.get_executor()] {
    if (pending->exchange(true)) return;
    net::post(ex, [weak, pending] {
      pending->store(false);
      if (auto self = weak.lock()) self->pump();
    });
  };
}

void Session::pump() {
  if (closed_ || writing_ || !exchange_) return;
  ExchangeOutput out;
  try {
    out = exchange_->next();
  } catch (const std::exception& e) {
    exchange_->cancel();  // nobody will read the rest: free its slot and stop its generation
    out = {};
    out.whole = ApiError::internal(user_message(e)).response();
  }
  if (out.whole) {
    finish_exchange();
    if (streaming_) close();  // a stream cannot turn into an error response any more
    else respond(std::move(*out.whole), !keep_alive_);
    return;
  }
  auto bytes = std::make_shared<std::string>();
  if (!out.stream_type.empty() && !streaming_) {
    streaming_ = true;
    chunked_ = version_ == 11;
    if (!chunked_) keep_alive_ = false;  // an HTTP/1.0 stream's body ends with the connection
    *bytes = stream_head(version_, out.stream_type, chunked_, keep_alive_);
  }
  if (!out.data.empty()) *bytes += chunked_ ? chunk(out.data) : out.data;
  if (out.end) {
    if (chunked_) *bytes += "0\r\n\r\n";
    stream_ended_ = true;
  }
  if (bytes->empty()) return;  // nothing new: the next wake brings it
  writing_ = true;
  write_pending_ = true;
  arm(ctx_.limits.write_timeout_s);
  net::async_write(socket_, net::buffer(*bytes), [self = shared_from_this(), bytes](beast::error_code ec, size_t n) {
    self->writing_ = false;
    self->write_pending_ = false;
    self->disarm();
    if (self->closed_) return;
    self->note_progress(n);
    if (ec) {
      self->client_gone();
      return;
    }
    if (self->stream_ended_) {
      self->stream_ended_ = false;
      self->streaming_ = false;
      self->finish_exchange();
      if (self->keep_alive_) self->next_request();
      else self->linger_close();
      return;
    }
    self->pump();
  });
}

// Callers hold a reference of their own, so dropping self_ never destroys the session under them.
void Session::finish_exchange() {
  exchange_.reset();
  self_.reset();
}

void Session::client_gone() {
  if (exchange_) {
    exchange_->cancel();
    exchange_.reset();
  }
  close();
}

// One read stays pending while an exchange runs: it sees the client's FIN or reset at once, and keeps
// any pipelined bytes for the requests after this one (up to the read buffer's cap).
void Session::watch() {
  if (watching_ || closed_) return;
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0) return;  // the client pipelined too much: a failed write still notices it leaving
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(std::min(room, kWatchReadBytes)),
                          [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_watch(ec, n); });
}

void Session::on_watch(const beast::error_code& ec, size_t n) {
  watching_ = false;
  buffer_.commit(n);
  if (closed_) return;
  if (phase_ == Phase::kClosing) {
    drained_ += n;
    buffer_.consume(buffer_.size());
    if (ec || drained_ > kLingerBytes) close();
    else drain();
    return;
  }
  if (ec == net::error::operation_aborted) {
    if (want_next_) {
      want_next_ = false;
      read_header();
    }
    return;
  }
  if (ec) {  // EOF or reset
    if (exchange_) {
      client_gone();
      return;
    }
    peer_done_ = true;
    if (want_next_) close();
    return;
  }
  if (want_next_) {
    want_next_ = false;
    read_header();
    return;
  }
  if (exchange_) watch();
}

bool Session::peer_gone() {
  char c;
  const ssize_t r = ::recv(socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// ---- deadlines and closing ----------------------------------------------------------------------------

void Session::arm(double s) { arm_until(Clock::now() + seconds(s)); }

void Session::arm_until(Clock::time_point deadline) {
  const uint64_t generation = ++timer_generation_;
  timer_.expires_at(deadline);
  timer_.async_wait([weak = weak_from_this(), generation](const beast::error_code& ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->on_deadline(generation);
  });
}

void Session::disarm() {
  ++timer_generation_;
  timer_.cancel();
}

void Session::on_deadline(uint64_t generation) {
  if (generation != timer_generation_ || closed_) return;
  const bool partial = (phase_ == Phase::kHeader && buffer_.size() > 0) || phase_ == Phase::kBody;
  if (partial) {
    // Best effort, never blocking: a client this slow may not read it either.
    static const std::string k408 = [] {
      const std::string body = ApiError::from_status(408).body();
      return "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
             "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    [[maybe_unused]] const ssize_t sent =
        ::send(socket_.native_handle(), k408.data(), k408.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  if (partial || phase_ == Phase::kServing) ctx_.metrics.http_connections_dropped += 1;
  close();
}

void Session::linger_close() {
  if (closed_) return;
  set_phase(Phase::kClosing);
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) {
    close();
    return;
  }
  arm(kLingerSeconds);
  drain();
}

void Session::drain() {
  if (closed_ || watching_) return;  // a pending read drains as well
  buffer_.consume(buffer_.size());
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(std::min(buffer_.max_size(), size_t{64} << 10)),
                          [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_watch(ec, n); });
}

void Session::close() {
  if (closed_) return;
  closed_ = true;
  if (exchange_) {
    exchange_->cancel();
    exchange_.reset();
  }
  self_.reset();
  release_body_budget();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  disarm();
  ctx_.open -= 1;
  ctx_.metrics.http_connections_open -= 1;
  set_phase(Phase::kClosed);
}

void Session::release_body_budget() {
  ctx_.body_budget_left += body_reserved_;
  body_reserved_ = 0;
}

// ---- progress ---------------------------------------------------------------------------------------

void Session::note_progress(size_t bytes) {
  if (bytes == 0) return;
  const Clock::time_point now = Clock::now();
  rate_ = recent_rate(now) + static_cast<double>(bytes) / kRateSeconds;
  rate_at_ = now;
  last_progress_ = now;
}

double Session::recent_rate(Clock::time_point now) const {
  return rate_ * std::exp(-std::chrono::duration<double>(now - rate_at_).count() / kRateSeconds);
}

double Session::stalled_seconds(Clock::time_point now) const {
  return std::chrono::duration<double>(now - last_progress_).count();
}

bool Session::lagging(Clock::time_point now) const {
  return stalled_seconds(now) >= kStallSeconds || recent_rate(now) < kLaggingBytesPerSecond;
}

bool Session::less_progress_than(const Session& other, Clock::time_point now) const {
  const double mine = stalled_seconds(now), theirs = other.stalled_seconds(now);
  const bool stalled = mine >= kStallSeconds, other_stalled = theirs >= kStallSeconds;
  if (stalled != other_stalled) return stalled;
  if (stalled) return mine > theirs;
  return recent_rate(now) < other.recent_rate(now);
}

std::shared_ptr<Session> least_progress(const ConnectionContext& ctx, bool body_only, const Session* than) {
  const Session::Clock::time_point now = Session::Clock::now();
  std::shared_ptr<Session> least;
  for (const auto& w : ctx.sessions) {
    auto s = w.lock();
    if (!s || s.get() == than) continue;
    if (body_only ? s->phase() != Session::Phase::kBody : !s->client_paced()) continue;
    if (than ? !s->less_progress_than(*than, now) : !s->lagging(now)) continue;
    if (!least || s->less_progress_than(*least, now)) least = std::move(s);
  }
  return least;
}

}  // namespace nanovllm::server
