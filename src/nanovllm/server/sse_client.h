// A small client for the server's streaming endpoints (bench serve and the tests): POSTs a JSON body and
// reads the `text/event-stream` reply event by event. Loopback use; no TLS.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace nanovllm::server {

struct SseResult {
  int status = 0;                   // HTTP status; 0 when no response came
  bool done = false;                // "data: [DONE]" was received
  bool cancelled = false;           // on_event returned false and the connection was dropped
  std::vector<std::string> events;  // the data: payloads before [DONE] (JSON text)
  std::string body;                 // the raw body (error responses are JSON, not SSE)
};

// on_event(payload) is called for each data: payload (not for [DONE]); returning false closes the
// connection mid-stream (a disconnecting client).
SseResult post_sse(const std::string& host, int port, const std::string& path, const std::string& body,
                   const std::function<bool(const std::string&)>& on_event = {}, const std::string& api_key = "",
                   std::chrono::seconds timeout = std::chrono::seconds(120));

}  // namespace nanovllm::server
