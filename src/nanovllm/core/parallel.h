// parallel_for: splits [0, n) into contiguous chunks run on a process-wide thread pool (the calling
// thread takes part). Small ranges, nested calls and calls made while another thread is using the pool
// run inline, so kernels can call it unconditionally. Pool size: hardware threads, capped by the
// environment variable NANOVLLM_NUM_THREADS (read once, at first use).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace nanovllm {

// Threads parallel_for uses (>= 1), the calling thread included.
int num_threads();

namespace detail {
// Type-erased reference to a callable `void(int64_t begin, int64_t end)`; valid during the call only.
struct RangeFn {
  void* obj;
  void (*call)(void* obj, int64_t begin, int64_t end);
  void operator()(int64_t b, int64_t e) const { call(obj, b, e); }
};
void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn);
}  // namespace detail

// Calls fn(begin, end) over disjoint chunks covering [0, n), each chunk at least `grain` items (except
// a shorter last one). Runs inline when n <= grain or only one thread is available. The first exception
// thrown by fn is rethrown here after all chunks finished.
template <typename F>
void parallel_for(int64_t n, F&& fn, int64_t grain = 1) {
  if (n <= 0) return;
  using Fn = std::remove_reference_t<F>;
  detail::RangeFn ref{const_cast<void*>(static_cast<const void*>(&fn)),
                      [](void* obj, int64_t b, int64_t e) { (*static_cast<Fn*>(obj))(b, e); }};
  detail::parallel_for_impl(n, grain < 1 ? 1 : grain, ref);
}

}  // namespace nanovllm
