#include "nanovllm/parallel/rank_threads.h"

#include <utility>

#include "nanovllm/core/error.h"

namespace nanovllm {

RankThreads::RankThreads(int size, std::function<void()> on_failure, std::chrono::milliseconds timeout)
    : size_(size), on_failure_(std::move(on_failure)), timeout_(timeout) {
  NANOVLLM_CHECK(size >= 1, "a tensor-parallel group needs at least one rank, got ", size);
  workers_.reserve(static_cast<size_t>(size - 1));
  for (int r = 1; r < size; ++r) workers_.emplace_back([this, r] { worker(r); });
  if (timeout_.count() > 0) watchdog_ = std::thread([this] { watchdog(); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  if (watchdog_.joinable()) watchdog_.join();
}

void RankThreads::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (!first_error_) first_error_ = std::move(error);
    if (failed_) return;
    failed_ = true;
  }
  if (on_failure_) on_failure_();
}

void RankThreads::watchdog() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (!running_ || failed_) {
      cv_.wait(lock);
      continue;
    }
    const auto deadline = started_ + timeout_;
    if (std::chrono::steady_clock::now() < deadline) {
      cv_.wait_until(lock, deadline);
      continue;
    }
    lock.unlock();
    fail(std::make_exception_ptr(Error(
        "a tensor-parallel step did not finish within " + std::to_string(timeout_.count()) +
        " ms (a rank is stuck, or its peers wait in a collective for it); the group was aborted")));
    lock.lock();
  }
}

void RankThreads::run_rank(int rank) {
  try {
    (*fn_)(rank);
  } catch (...) {
    fail(std::current_exception());
  }
}

void RankThreads::worker(int rank) {
  uint64_t done = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || job_ != done; });
      if (stop_) return;
      done = job_;
    }
    run_rank(rank);
    std::lock_guard lock(mu_);
    if (--pending_ == 0) cv_.notify_all();
  }
}

void RankThreads::run(const std::function<void(int rank)>& fn) {
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    first_error_ = nullptr;
    failed_ = false;
    running_ = true;
    started_ = std::chrono::steady_clock::now();
    pending_ = size_ - 1;
    ++job_;
  }
  cv_.notify_all();
  run_rank(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
    running_ = false;
    fn_ = nullptr;
    error = std::exchange(first_error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace nanovllm
