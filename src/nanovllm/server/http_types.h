// The contract between the HTTP transport (http_server / http_session, Boost.Beast) and the OpenAI
// server on top: requests and responses as plain values, and Exchange — a response produced over time (a
// generation) that the connection drives. Nothing here includes Beast, so the protocol code stays light.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanovllm::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query, percent-encoding kept
  unsigned version = 11;  // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case, in arrival order
  bool has_body = false;  // a body follows the header (Content-Length > 0 or chunked)
  std::string body;       // set once the whole body is in

  std::string header(std::string_view lower_name) const {  // the first value, or ""
    for (const auto& [name, value] : headers)
      if (name == lower_name) return value;
    return {};
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones (Allow, ...)
};

// What the connection sends next for a response produced over time.
struct ExchangeOutput {
  std::optional<HttpResponse> whole;  // the complete response (a result or an error); the exchange is over
  std::string stream_type;            // given once, before the first data: a 200 stream of this content type
  std::string data;                   // stream bytes
  bool end = false;                   // the stream is complete after `data`
};

// A response the connection drives: start() once; next() whenever woken, each time the previous bytes
// are written (the connection writes at most one piece at a time, so a slow reader slows its own stream
// only); cancel() when the client is gone or the server closes the connection.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // `wake` may be called from any thread, as often as there is news; it is cheap and coalesces.
  virtual void start(std::function<void()> wake) = 0;
  virtual ExchangeOutput next() = 0;  // I/O thread
  virtual void cancel() = 0;          // I/O thread; idempotent
};

// The application side of the transport. Both calls run on the I/O thread and must be quick: heavy work
// (parsing, tokenizing, generating) belongs in an Exchange.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // The header is in, the body is not: a response now (401, 404, 405, 413, 503, ...) — the body is then
  // never read and the connection closes after the response — or nullopt to read the body.
  virtual std::optional<HttpResponse> on_header(const HttpRequest& request) = 0;
  struct Reply {
    std::optional<HttpResponse> now;
    std::shared_ptr<Exchange> later;  // when `now` is empty
  };
  virtual Reply on_request(HttpRequest&& request) = 0;
};

}  // namespace nanovllm::server
