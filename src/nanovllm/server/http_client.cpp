#include "nanovllm/server/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace nanovllm::server {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// Runs one asynchronous step to completion on the private I/O context; tcp_stream's expiry bounds it.
template <typename Start>
beast::error_code run(net::io_context& io, Start&& start) {
  beast::error_code result;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run();
  return result;
}

}  // namespace

HttpClientResponse http_fetch(const std::string& host, int port, const HttpClientRequest& request,
                              std::chrono::milliseconds timeout,
                              const std::function<bool(int, std::string_view)>& on_body) {
  HttpClientResponse out;
  net::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    out.error = "resolve: " + ec.message();
    return out;
  }
  stream.expires_after(timeout);
  if ((ec = run(io, [&](auto h) { stream.async_connect(endpoints, h); }))) {
    out.error = "connect: " + ec.message();
    return out;
  }
  http::request<http::string_body> req(http::string_to_verb(request.method), request.target, 11);
  req.set(http::field::host, host);
  for (const auto& [name, value] : request.headers) req.set(name, value);
  req.body() = request.body;
  req.prepare_payload();
  stream.expires_after(timeout);
  if ((ec = run(io, [&](auto h) { http::async_write(stream, req, h); }))) {
    out.error = "send: " + ec.message();
    // The server may have answered before it stopped reading (413, 401): read that answer below.
  }

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(timeout);
  if ((ec = run(io, [&](auto h) { http::async_read_header(stream, buffer, parser, h); }))) {
    out.error = "read: " + ec.message();
    return out;
  }
  out.status = parser.get().result_int();
  size_t delivered = 0;
  while (!parser.is_done()) {
    stream.expires_after(timeout);
    ec = run(io, [&](auto h) { http::async_read_some(stream, buffer, parser, h); });
    const std::string& body = parser.get().body();
    if (on_body && body.size() > delivered) {
      const bool go_on = on_body(out.status, std::string_view(body).substr(delivered));
      delivered = body.size();
      if (!go_on) {
        out.body = body;
        out.error = "hung up";
        return out;
      }
    }
    delivered = body.size();
    if (ec) {
      out.error = "read: " + ec.message();
      out.body = body;
      return out;
    }
  }
  out.body = std::move(parser.get().body());
  if (on_body && out.body.size() > delivered) on_body(out.status, std::string_view(out.body).substr(delivered));
  out.complete = true;
  return out;
}

}  // namespace nanovllm::server
