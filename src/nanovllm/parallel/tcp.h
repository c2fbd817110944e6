// Blocking TCP sockets for a tensor-parallel group spread over several processes (docs/tensor_parallel.md,
// section 7): the bootstrap, the step channel and the CPU backend's socket communicator. A message is a
// frame: an 8-byte little-endian length, then the bytes. Every failure (refused, reset, closed by the peer,
// timed out) throws nanovllm::Error naming the peer, so a node that dies fails the step instead of hanging it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace nanovllm {

class Socket {
 public:
  Socket() = default;
  Socket(int fd, std::string peer);  // takes ownership of a connected socket
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }  // how errors name the other end

  void send_all(const void* data, size_t n);
  void recv_all(void* data, size_t n);  // throws when the peer closes before n bytes came
  void send_frame(std::string_view bytes);
  // Throws for a frame longer than max_bytes (a peer that speaks another protocol).
  std::string recv_frame(size_t max_bytes = size_t{1} << 32);
  // A recv that waits longer than this throws (0: wait forever, the default).
  void set_receive_timeout(std::chrono::milliseconds timeout);
  // Ends both directions: a thread blocked in recv on this socket returns (and throws). Idempotent.
  void shutdown();

  // Both ends of a connected pair inside this process (socketpair): ranks of one process that talk to a
  // remote group the same way as remote ranks. The first end's peer is called `first_peer`.
  static std::pair<Socket, Socket> pair(const std::string& first_peer, const std::string& second_peer);

 private:
  int fd_ = -1;
  std::string peer_;
};

// "HOST:PORT" (the last colon splits, so "[::1]:5000" and "::1:5000" work) -> {host, port}. Throws
// nanovllm::Error naming `option` for anything else.
std::pair<std::string, uint16_t> parse_host_port(const std::string& addr, const char* option = "dist_init_addr");

class Listener {
 public:
  // Binds host:port (SO_REUSEADDR; port 0: any free port) and listens. Throws naming the address.
  Listener(const std::string& host, uint16_t port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  uint16_t port() const { return port_; }
  // The next connection; throws when none comes within `timeout`.
  Socket accept(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::string where_;
};

// Connects to host:port, retrying while the connection is refused (the listener may start later) until
// `timeout`; then throws naming the address.
Socket connect_to(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);

}  // namespace nanovllm
