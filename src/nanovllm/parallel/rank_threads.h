// RankThreads: the threads of a tensor-parallel group in one process (docs/tensor_parallel.md, section 1):
// rank 0 is the calling thread (the engine thread), ranks 1..N-1 are workers that live as long as this
// object. run(fn) calls fn(rank) on every rank at once and returns when all have returned.
//
// Failure: when fn throws on a rank, `on_failure` runs at once (it aborts the group's communicator, so
// ranks waiting in a collective for the failed one throw instead of waiting forever), and run() rethrows,
// after every rank returned, the first exception thrown — the cause, not the other ranks' "aborted".
// Watchdog (timeout > 0): a run() still going after `timeout` is a stuck group (a rank blocked, its peers
// waiting in a collective for it): on_failure runs, and run() throws "did not finish within" once the
// ranks return (aborted collectives return; a rank stuck outside them still keeps run() waiting).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nanovllm {

class RankThreads {
 public:
  RankThreads(int size, std::function<void()> on_failure,
              std::chrono::milliseconds timeout = std::chrono::milliseconds::zero());
  ~RankThreads();  // stops and joins the workers (no run() may be in progress)
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return size_; }
  void run(const std::function<void(int rank)>& fn);

 private:
  void worker(int rank);
  void run_rank(int rank);  // fn_(rank), recording a failure
  void fail(std::exception_ptr error);  // records the first error, then on_failure_ (once per run)
  void watchdog();

  int size_;
  std::function<void()> on_failure_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* fn_ = nullptr;  // the job of the current run()
  uint64_t job_ = 0;                              // counts run() calls: a worker runs each job once
  int pending_ = 0;                               // workers not yet done with the current job
  bool stop_ = false;
  std::exception_ptr first_error_;
  bool running_ = false;  // a run() is in progress (the watchdog's subject)
  bool failed_ = false;   // on_failure_ ran for the current run()
  std::chrono::steady_clock::time_point started_;
  std::vector<std::thread> workers_;
  std::thread watchdog_;  // only with a timeout
};

}  // namespace nanovllm
