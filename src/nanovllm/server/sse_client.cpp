#include "nanovllm/server/sse_client.h"

#include "nanovllm/server/http_client.h"

namespace nanovllm::server {

SseResult post_sse(const std::string& host, int port, const std::string& path, const std::string& body,
                   const std::function<bool(const std::string&)>& on_event, const std::string& api_key,
                   std::chrono::seconds timeout) {
  SseResult r;
  HttpClientRequest req;
  req.method = "POST";
  req.target = path;
  req.body = body;
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
  std::string pending;  // bytes of an event not yet complete
  const HttpClientResponse res = http_fetch(host, port, req, timeout, [&](int status, std::string_view data) {
    r.status = status;
    if (status != 200) return true;
    pending.append(data);
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
      r.events.push_back(std::move(payload));
      if (on_event && !on_event(r.events.back())) {
        r.cancelled = true;
        return false;
      }
    }
    return true;
  });
  r.status = res.status;
  r.body = res.body;
  return r;
}

}  // namespace nanovllm::server
