// What one HTTP client may cost the server: bytes before a request is understood, time to send it, and
// connections. The body limit itself is ServerConfig::max_body_bytes (every transfer encoding).
#pragma once

#include <cstddef>

namespace nanovllm::server {

struct HttpLimits {
  size_t max_header_bytes = 16u << 10;  // request line + header fields; 431 beyond (the target counts too)
  int max_header_fields = 100;          // 431 beyond
  // Sum of the request-body bytes received and not yet handed on, over all connections. Reserved as the
  // bytes arrive (a header that only announces a length reserves nothing); when a body's next bytes do not
  // fit, the body that has made the least progress (see below) is dropped to make room, or, when that is
  // the one receiving, it gets 503. Bounds the memory of many slow uploads. 0: 8 x the body limit.
  size_t max_body_bytes_in_flight = 0;
  // Deadlines for the whole request line + headers (from when the server starts waiting for them, so also
  // an idle keep-alive connection) and for the whole body; not per recv(), so trickling bytes does not help.
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  // A body that receives nothing for this long is dropped (408), long before body_timeout_s.
  double body_stall_timeout_s = 10;
  double write_timeout_s = 30;  // each write of a response (a client that stops reading is dropped)
  // Open connections. At the cap a new connection replaces, in this order: one that is closing anyway, the
  // one that has waited longest for its request header (slow or idle), or the body-receiving or
  // response-writing connection that has made the least progress, if it lags (a client that stops reading
  // its responses, a stalled or trickling upload: Session::lagging). Connections waiting for the engine or
  // moving their bytes are never replaced, so trickling or non-reading clients cannot lock others out.
  // Also capped by RLIMIT_NOFILE.
  int max_connections = 1024;
};

}  // namespace nanovllm::server
