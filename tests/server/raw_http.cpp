#include "server/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "nanovllm/core/build_info.h"

namespace nanovllm::testing {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

RawConn::RawConn(int port, int receive_buffer) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // trickled bytes leave one by one
}

RawConn::~RawConn() { close(); }

void RawConn::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawConn::send_all(std::string_view data, double timeout_s) {
  if (fd_ < 0) return false;
  const auto deadline = after(timeout_s);
  while (!data.empty()) {
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return false;
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string RawConn::read_until_close(double timeout_s, size_t max_bytes) {
  std::string out;
  if (fd_ < 0) return out;
  const auto deadline = after(timeout_s);
  char buf[65536];
  while (out.size() < max_bytes) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) break;
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string RawConn::read_responses(size_t n, double timeout_s) {
  std::string out;
  if (fd_ < 0) return out;
  const auto deadline = after(timeout_s);
  char buf[65536];
  while (true) {
    const auto rs = parse_responses(out, /*closed=*/false);
    size_t whole = 0;
    for (const RawResponse& r : rs) whole += r.complete ? 1 : 0;
    if (whole >= n) break;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) break;
    const ssize_t got = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

bool RawConn::wait_closed(double timeout_s) {
  if (fd_ < 0) return true;
  const auto deadline = after(timeout_s);
  char buf[4096];
  while (true) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return false;
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset
  }
}

bool RawConn::read_discarding_until(std::string_view marker, double timeout_s, size_t* bytes) {
  if (bytes) *bytes = 0;
  if (fd_ < 0) return false;
  const auto deadline = after(timeout_s);
  std::string tail;  // the last bytes, where a marker split between reads is found
  char buf[65536];
  while (true) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return false;
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    if (bytes) *bytes += static_cast<size_t>(n);
    tail.append(buf, static_cast<size_t>(n));
    if (tail.find(marker) != std::string::npos) return true;
    if (tail.size() > marker.size()) tail.erase(0, tail.size() - marker.size());
  }
}

std::string prompt_lists_json(const std::vector<std::vector<int32_t>>& prompts) {
  std::string out = "[";
  for (size_t i = 0; i < prompts.size(); ++i) {
    out += i ? ",[" : "[";
    for (size_t k = 0; k < prompts[i].size(); ++k) {
      if (k) out += ',';
      out += std::to_string(prompts[i][k]);
    }
    out += ']';
  }
  return out + "]";
}

std::vector<RawResponse> parse_responses(std::string_view bytes, bool closed) {
  std::vector<RawResponse> out;
  while (!bytes.empty()) {
    const size_t head_end = bytes.find("\r\n\r\n");
    if (head_end == std::string_view::npos) break;
    RawResponse r;
    std::string_view head = bytes.substr(0, head_end);
    const size_t line_end = head.find("\r\n");
    const std::string_view status_line = head.substr(0, line_end);
    r.version = std::string(status_line.substr(0, status_line.find(' ')));
    r.status = std::atoi(std::string(status_line.substr(status_line.find(' ') + 1, 3)).c_str());
    head.remove_prefix(line_end == std::string_view::npos ? head.size() : line_end + 2);
    while (!head.empty()) {
      const size_t e = head.find("\r\n");
      const std::string_view line = head.substr(0, e);
      const size_t colon = line.find(':');
      if (colon != std::string_view::npos) {
        std::string value(line.substr(colon + 1));
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[lower(std::string(line.substr(0, colon)))] = value;
      }
      head.remove_prefix(e == std::string_view::npos ? head.size() : e + 2);
    }
    bytes.remove_prefix(head_end + 4);
    const bool no_body = r.status == 204 || r.status == 304 || (r.status >= 100 && r.status < 200);
    if (no_body) {
      r.complete = true;
    } else if (r.headers.count("transfer-encoding") && lower(r.headers["transfer-encoding"]) == "chunked") {
      r.chunked = true;
      while (true) {
        const size_t e = bytes.find("\r\n");
        if (e == std::string_view::npos) break;
        const size_t size = std::strtoul(std::string(bytes.substr(0, e)).c_str(), nullptr, 16);
        if (bytes.size() < e + 2 + size + 2) break;
        r.body.append(bytes.substr(e + 2, size));
        bytes.remove_prefix(e + 2 + size + 2);
        if (size == 0) {
          r.complete = true;
          break;
        }
      }
    } else if (r.headers.count("content-length")) {
      const size_t len = std::strtoul(r.headers["content-length"].c_str(), nullptr, 10);
      r.body = std::string(bytes.substr(0, len));
      r.complete = bytes.size() >= len;
      bytes.remove_prefix(std::min(len, bytes.size()));
    } else {
      r.body = std::string(bytes);  // delimited by the connection's close
      r.complete = closed;
      bytes = {};
    }
    out.push_back(std::move(r));
    if (!out.back().complete) break;
  }
  return out;
}

std::string raw_post(const std::string& path, const std::string& body, const std::string& extra_headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

size_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

double health_ms(int port, double timeout_s) {
  const auto t0 = Clock::now();
  RawConn c(port);
  if (!c.ok() || !c.send_all("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout_s)) return -1;
  const auto rs = parse_responses(c.read_responses(1, timeout_s), false);
  if (rs.empty() || !rs[0].complete || rs[0].status != 200) return -1;
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool rss_is_meaningful() { return !sanitized_build(); }

void expect_bounded_memory(size_t idle, size_t peak_slack, const std::function<void()>& flood) {
  constexpr size_t kMiB = 1u << 20;
  std::atomic<bool> running{true};
  std::atomic<size_t> peak{rss_bytes()};
  std::thread sampler([&] {
    while (running) {
      peak = std::max<size_t>(peak, rss_bytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  flood();
  running = false;
  sampler.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server finishes closing
  const size_t settled = rss_bytes();
  if (!rss_is_meaningful()) return;  // ASan keeps freed memory in its quarantine
  std::printf("RSS: idle %zu MiB, peak %zu MiB, after %zu MiB\n", idle / kMiB, peak.load() / kMiB, settled / kMiB);
  EXPECT_LT(peak.load(), idle + peak_slack) << "idle " << idle / kMiB << " MiB, peak " << peak / kMiB << " MiB";
  EXPECT_LT(settled, idle + kRssAfterSlack)
      << "idle " << idle / kMiB << " MiB, after " << settled / kMiB << " MiB";
}
double timing_scale() { return sanitized_build() ? 3.0 : 1.0; }

}  // namespace nanovllm::testing
