#include "nanovllm/parallel/tcp.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "nanovllm/core/error.h"

namespace nanovllm {
namespace {

std::string errno_text() { return std::strerror(errno); }

// getaddrinfo for TCP; the caller frees the list. Throws naming the address.
addrinfo* resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  NANOVLLM_CHECK(rc == 0, "cannot resolve '", host, ":", port, "': ", gai_strerror(rc));
  return list;
}

// Small messages (a decode step's all-reduce, a step's few KB) must not wait for Nagle's timer.
void set_no_delay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

Socket::Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), peer_(std::move(other.peer_)) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    peer_ = std::move(other.peer_);
    other.fd_ = -1;
  }
  return *this;
}

void Socket::send_all(const void* data, size_t n) {
  NANOVLLM_CHECK(fd_ >= 0, "send to ", peer_, ": the socket is closed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    NANOVLLM_CHECK(k > 0, "send to ", peer_, " failed: ", errno_text());
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void Socket::recv_all(void* data, size_t n) {
  NANOVLLM_CHECK(fd_ >= 0, "receive from ", peer_, ": the socket is closed");
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd_, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    NANOVLLM_CHECK(k != 0, "connection to ", peer_, " closed by the peer");
    NANOVLLM_CHECK(k > 0 || (errno != EAGAIN && errno != EWOULDBLOCK), "no answer from ", peer_, " in time");
    NANOVLLM_CHECK(k > 0, "receive from ", peer_, " failed: ", errno_text());
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void Socket::send_frame(std::string_view bytes) {
  const uint64_t n = bytes.size();  // little-endian on every host we build for (x86-64, aarch64)
  send_all(&n, sizeof(n));
  send_all(bytes.data(), bytes.size());
}

std::string Socket::recv_frame(size_t max_bytes) {
  uint64_t n = 0;
  recv_all(&n, sizeof(n));
  NANOVLLM_CHECK(n <= max_bytes, "message of ", n, " bytes from ", peer_, " (at most ", max_bytes,
                 "): not a nano-vLLM peer?");
  std::string bytes(static_cast<size_t>(n), '\0');
  recv_all(bytes.data(), bytes.size());
  return bytes;
}

void Socket::set_receive_timeout(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  NANOVLLM_CHECK(setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0, "SO_RCVTIMEO: ", errno_text());
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::pair<Socket, Socket> Socket::pair(const std::string& first_peer, const std::string& second_peer) {
  int fds[2];
  NANOVLLM_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair: ", errno_text());
  return {Socket(fds[0], first_peer), Socket(fds[1], second_peer)};
}

std::pair<std::string, uint16_t> parse_host_port(const std::string& addr, const char* option) {
  const size_t colon = addr.rfind(':');
  NANOVLLM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < addr.size(), option,
                 " must be HOST:PORT, got '", addr, "'");
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = addr.substr(colon + 1);
  uint32_t port = 0;
  for (char c : port_text) {
    NANOVLLM_CHECK(c >= '0' && c <= '9' && port <= 65535, option, ": bad port '", port_text, "' in '", addr, "'");
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  NANOVLLM_CHECK(port >= 1 && port <= 65535, option, ": port ", port_text, " outside [1, 65535] in '", addr, "'");
  return {host, static_cast<uint16_t>(port)};
}

Listener::Listener(const std::string& host, uint16_t port) : where_(host + ":" + std::to_string(port)) {
  addrinfo* list = resolve(host, port, /*passive=*/true);
  std::string last_error = "no address";
  for (addrinfo* a = list; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      fd_ = fd;
      break;
    }
    last_error = errno_text();
    ::close(fd);
  }
  freeaddrinfo(list);
  NANOVLLM_CHECK(fd_ >= 0, "cannot listen on ", where_, ": ", last_error);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  NANOVLLM_CHECK(getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0, "getsockname: ", errno_text());
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

Socket Listener::accept(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    NANOVLLM_CHECK(left.count() > 0, "no connection on ", where_, " within ", timeout.count() / 1000.0, " s");
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno != EINTR) NANOVLLM_FAIL("poll on ", where_, ": ", errno_text());
    if (rc <= 0) continue;
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    const int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up between poll and accept
    set_no_delay(fd);
    char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
    (void)getnameinfo(reinterpret_cast<sockaddr*>(&from), len, host, sizeof(host), serv, sizeof(serv),
                      NI_NUMERICHOST | NI_NUMERICSERV);
    return Socket(fd, std::string(host) + ":" + serv);
  }
}

Socket connect_to(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error;
  for (;;) {
    addrinfo* list = resolve(host, port, /*passive=*/false);
    for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(list);
        set_no_delay(fd);
        return Socket(fd, where);
      }
      last_error = errno_text();
      ::close(fd);
    }
    freeaddrinfo(list);
    NANOVLLM_CHECK(std::chrono::steady_clock::now() < deadline, "cannot connect to ", where, " within ",
                   timeout.count() / 1000.0, " s: ", last_error, " (is node 0 running with this --dist-init-addr?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace nanovllm
