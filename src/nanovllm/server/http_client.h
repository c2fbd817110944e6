// A small blocking HTTP/1.1 client for loopback use (bench serve, the tests): one request per fresh
// connection, a timeout for each step (connect, send, every read), and the body handed over as it arrives
// so SSE streams can be read event by event. No TLS.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanovllm::server {

struct HttpClientRequest {
  std::string method = "GET";
  std::string target = "/";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Host, Content-Length are added
};

struct HttpClientResponse {
  int status = 0;     // 0: no response (connect / send / read failed; see error)
  std::string body;   // the whole body (also when it was handed to on_body)
  std::string error;  // why the exchange did not complete
  bool complete = false;  // the body arrived in full
};

// on_body(status, bytes) gets the body as it arrives; returning false hangs up (a disconnecting client).
HttpClientResponse http_fetch(const std::string& host, int port, const HttpClientRequest& request,
                              std::chrono::milliseconds timeout,
                              const std::function<bool(int, std::string_view)>& on_body = {});

}  // namespace nanovllm::server
