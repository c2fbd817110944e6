#include "nanovllm/server/sse_client.h"

#include <httplib.h>

namespace nanovllm::server {

SseResult post_sse(const std::string& host, int port, const std::string& path, const std::string& body,
                   const std::function<bool(const std::string&)>& on_event, const std::string& api_key,
                   std::chrono::seconds timeout) {
  SseResult r;
  httplib::Client cli(host, port);
  cli.set_read_timeout(timeout.count(), 0);
  cli.set_write_timeout(timeout.count(), 0);
  cli.set_connection_timeout(10, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
  std::string pending;  // bytes of an event not yet complete
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    r.body.append(data, n);
    if (r.status != 200) return true;
    pending.append(data, n);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // comments / other fields
      std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        r.done = true;
        continue;
      }
      r.events.push_back(payload);
      if (on_event && !on_event(r.events.back())) {
        r.cancelled = true;
        return false;
      }
    }
    return true;
  };
  cli.send(req);
  return r;
}

}  // namespace nanovllm::server
