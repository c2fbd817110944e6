#include "nanovllm/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nanovllm/core/env.h"

namespace nanovllm {
namespace {

int configured_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  if (n < 1) n = 1;
  if (environment().num_threads > 0) n = environment().num_threads;
  return n;
}

thread_local bool t_inside_pool = false;  // set on pool workers and on a caller while it runs a job

// One parallel_for call: chunk c covers [c * chunk, min(n, (c + 1) * chunk)).
struct Job {
  int64_t n = 0;
  int64_t chunk = 1;
  int64_t num_chunks = 0;
  detail::RangeFn fn{};
  std::atomic<int64_t> next{0};
  std::mutex err_mu;
  std::exception_ptr err;

  void run_chunks() {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) return;
      const int64_t b = c * chunk;
      const int64_t e = std::min(n, b + chunk);
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!err) err = std::current_exception();
        next.store(num_chunks, std::memory_order_relaxed);  // skip the remaining chunks
      }
    }
  }
};

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int threads() const { return threads_; }

  // Returns false (nothing run) when another thread holds the pool.
  bool try_run(Job& job) {
    std::unique_lock<std::mutex> submit(submit_mu_, std::try_to_lock);
    if (!submit.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &job;
      active_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    cv_work_.notify_all();
    t_inside_pool = true;
    job.run_chunks();
    t_inside_pool = false;
    // Every worker must have left the job before it (on the caller's stack) goes away.
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [this] { return active_ == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  void worker_loop() {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      job->run_chunks();
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--active_ == 0) cv_done_.notify_one();
      }
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  uint64_t generation_ = 0;
  Job* job_ = nullptr;
  int active_ = 0;
  bool stop_ = false;
};

ThreadPool& pool() {
  static ThreadPool p(configured_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().threads(); }

namespace detail {

void parallel_for_impl(int64_t n, int64_t grain, RangeFn fn) {
  const int threads = t_inside_pool ? 1 : num_threads();
  if (threads <= 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread so uneven work (causal attention rows) balances.
  const int64_t max_chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t{threads} * 4);
  Job job;
  job.n = n;
  job.chunk = (n + max_chunks - 1) / max_chunks;
  job.num_chunks = (n + job.chunk - 1) / job.chunk;
  job.fn = fn;
  if (!pool().try_run(job)) {
    fn(0, n);  // pool busy with another caller: run here rather than wait
    return;
  }
  if (job.err) std::rethrow_exception(job.err);
}

}  // namespace detail
}  // namespace nanovllm
