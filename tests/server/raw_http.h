// Raw loopback HTTP for the hostile-client tests: a TCP connection that sends exactly the bytes it is given
// (malformed, trickled, pipelined, endless) and reads with deadlines, a parser for the bytes that come
// back, the process's resident memory, and the time /health takes. Loopback only; every call is bounded
// in time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::testing {

class RawConn {
 public:
  // Connects to 127.0.0.1:port; ok() says whether it did. `receive_buffer` > 0: SO_RCVBUF (set before the
  // connection, so the window the server sees stays that small: a client that reads slowly, or not at all).
  explicit RawConn(int port, int receive_buffer = 0);
  ~RawConn();
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return fd_ >= 0; }
  // Sends everything (false once the peer closed or reset, or after `timeout_s` without progress).
  bool send_all(std::string_view data, double timeout_s = 10);
  // Reads until the peer closes, `max_bytes` arrived, or `timeout_s` passes.
  std::string read_until_close(double timeout_s, size_t max_bytes = 64u << 20);
  // Reads until `n` complete responses are in (see parse_responses), the peer closes, or `timeout_s` passes.
  std::string read_responses(size_t n, double timeout_s);
  // True when the peer closed (EOF or reset) within `timeout_s`; bytes that arrive meanwhile are dropped.
  bool wait_closed(double timeout_s);
  // Reads and drops bytes (keeping none, so a long stream costs this process nothing) until `marker` has
  // passed, the peer closes, or `timeout_s` passes. True when the marker came; `bytes`: how many were read.
  bool read_discarding_until(std::string_view marker, double timeout_s, size_t* bytes = nullptr);
  void close();

 private:
  int fd_ = -1;
};

struct RawResponse {
  std::string version;                         // "HTTP/1.1"
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  bool chunked = false;
  bool complete = false;                       // the body was whole (by length, chunks, or close)
};
// Splits bytes read from one connection into responses. `closed`: the peer closed after them (a response
// without length runs to the end).
std::vector<RawResponse> parse_responses(std::string_view bytes, bool closed = true);

// Token-id prompts as JSON text, "[[1,2],[3]]", written directly (no JSON DOM of millions of numbers).
std::string prompt_lists_json(const std::vector<std::vector<int32_t>>& prompts);

// An HTTP/1.1 request with a Content-Length body.
std::string raw_post(const std::string& path, const std::string& body, const std::string& extra_headers = "");

// Resident set size of this process (VmRSS of /proc/self/status), bytes.
size_t rss_bytes();
// Milliseconds a GET /health on a fresh connection takes to answer 200; -1 when it fails or exceeds
// `timeout_s`.
double health_ms(int port, double timeout_s = 5);

// Whether RSS checks mean anything in this build: AddressSanitizer keeps freed memory in quarantine.
bool rss_is_meaningful();
// The memory bound of the flood tests: runs `flood` while sampling this process's RSS (the server runs in
// it), then expects the peak below `idle` + `peak_slack` and, a moment after the flood, RSS below `idle` +
// kRssAfterSlack. Prints the three values; checks nothing where !rss_is_meaningful().
// kRssAfterSlack: what the allocator may keep of the flood's memory (9-10 MiB measured after the chunked-body
// flood). An absolute bound: a ratio of idle moved with whatever else the process held (idle was 153 MiB while
// the tokenizer loader left its 100 MB JSON DOM freed but resident; 76 MiB without it).
constexpr size_t kRssAfterSlack = 16u << 20;
void expect_bounded_memory(size_t idle, size_t peak_slack, const std::function<void()>& flood);
// Latency bounds are multiplied by this: 3 under the sanitizers (everything runs ~2-3x slower), else 1.
double timing_scale();

}  // namespace nanovllm::testing
