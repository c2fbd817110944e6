#include "nanovllm/offload/offload_host_pool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"

namespace nanovllm {

OffloadHostPool::OffloadHostPool(Allocator& host, int64_t num_layers, int64_t token_bytes, int64_t scale_bytes,
                                 bool scales_by_head)
    : host_(host),
      num_layers_(num_layers),
      token_bytes_(token_bytes),
      scale_bytes_(scale_bytes),
      scales_by_head_(scales_by_head && scale_bytes > 0) {}

namespace {
size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
size_t region_bytes(int64_t token_bytes, int64_t scale_bytes, int64_t tokens) {
  const size_t n = static_cast<size_t>(tokens);
  return scale_bytes ? aligned(n * static_cast<size_t>(token_bytes)) + n * static_cast<size_t>(scale_bytes)
                     : n * static_cast<size_t>(token_bytes);
}
}  // namespace

size_t OffloadHostPool::bytes_for(int64_t num_layers, int64_t token_bytes, int64_t scale_bytes, int64_t tokens,
                                  bool scales_by_head) {
  const size_t copy = scales_by_head ? static_cast<size_t>(tokens * scale_bytes) : 0;  // the head-major scales
  return static_cast<size_t>(num_layers) * 2 * (region_bytes(token_bytes, scale_bytes, tokens) + copy);
}

size_t OffloadHostPool::scale_offset() const { return aligned(static_cast<size_t>(capacity_ * token_bytes_)); }

double OffloadHostPool::reserve(int64_t tokens) {
  if (tokens <= capacity_) return 0;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  k_.clear();
  v_.clear();
  k_by_head_.clear();
  v_by_head_.clear();
  capacity_ = 0;
  const size_t region = region_bytes(token_bytes_, scale_bytes_, tokens);
  const size_t copy = scales_by_head_ ? static_cast<size_t>(tokens * scale_bytes_) : 0;
  const size_t regions_n = static_cast<size_t>(2 * num_layers_);
  const size_t n = scales_by_head_ ? 2 * regions_n : regions_n;  // the regions, then the head-major scales
  std::vector<Buffer> regions(n);

  // Pinning is page-fault and page-lock bound: several threads, one region at a time each.
  std::atomic<size_t> next{0}, done{0};
  std::mutex err_mu;
  std::exception_ptr err;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        regions[i] = Buffer(host_, i < regions_n ? region : copy);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!err) err = std::current_exception();
        next = n;
      }
      ++done;
    }
  };
  const size_t threads = std::min<size_t>({8, n, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const double gib = static_cast<double>(region + copy) * static_cast<double>(regions_n) / (1 << 30);
  if (tty && gib >= 1.0) {
    while (done.load() < n && !err) {
      std::fprintf(stderr, "\rallocating host KV pool: %zu/%zu regions (%.1f of %.1f GiB)", done.load(), n,
                   gib * static_cast<double>(done.load()) / static_cast<double>(n), gib);
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (std::thread& t : pool) t.join();
  if (tty && gib >= 1.0) std::fprintf(stderr, "\rallocating host KV pool: %zu/%zu regions (%.1f GiB) done\n", n, n, gib);
  if (err) std::rethrow_exception(err);

  for (size_t i = 0; i < n; i += 2) {
    (i < regions_n ? k_ : k_by_head_).push_back(std::move(regions[i]));
    (i < regions_n ? v_ : v_by_head_).push_back(std::move(regions[i + 1]));
  }
  capacity_ = tokens;
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  NANOVLLM_INFO("host KV pool: ", tokens, " tokens x ", num_layers_, " layers = ", gib, " GiB in ", s, " s");
  return s;
}

int64_t available_host_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (f >> key >> value) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return value * 1024;  // kB
  }
  return -1;
}

}  // namespace nanovllm
