// What one HTTP client may cost the server: bytes before a request is understood, time to send it, and
// connections. The body limit itself is ServerConfig::max_body_bytes (every transfer encoding).
#pragma once

#include <cstddef>

namespace nanovllm::server {

struct HttpLimits {
  size_t max_header_bytes = 16u << 10;  // request line + header fields; 431 beyond (the target counts too)
  int max_header_fields = 100;          // 431 beyond
  // Sum of the request bodies being received at once; a body that does not fit gets 503. Bounds the memory
  // of many slow uploads (each also bounded by the body limit and the body deadline). 0: 8 x the body limit.
  size_t max_body_bytes_in_flight = 0;
  // Deadlines for the whole request line + headers (from when the server starts waiting for them, so also
  // an idle keep-alive connection) and for the whole body; not per recv(), so trickling bytes does not help.
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double write_timeout_s = 30;  // each write of a response (a client that stops reading is dropped)
  // Open connections. At the cap a new connection replaces the one that has waited longest for its request
  // to arrive (slow or idle), so trickling clients cannot lock others out. Also capped by RLIMIT_NOFILE.
  int max_connections = 1024;
};

}  // namespace nanovllm::server
