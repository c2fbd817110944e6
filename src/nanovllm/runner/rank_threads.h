// RankThreads: the threads of a tensor-parallel group in one process (docs/tensor_parallel.md, section 1):
// rank 0 is the calling thread (the engine thread), ranks 1..N-1 are workers that live as long as this
// object. run(fn) calls fn(rank) on every rank at once and returns when all have returned.
//
// Failure: when fn throws on a rank, `on_failure` runs at once (it aborts the group's communicator, so
// ranks waiting in a collective for the failed one throw instead of waiting forever), and run() rethrows,
// after every rank returned, the first exception thrown — the cause, not the other ranks' "aborted".
#pragma once

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
  RankThreads(int size, std::function<void()> on_failure);
  ~RankThreads();  // stops and joins the workers (no run() may be in progress)
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return size_; }
  void run(const std::function<void(int rank)>& fn);

 private:
  void worker(int rank);
  void run_rank(int rank);  // fn_(rank), recording a failure

  int size_;
  std::function<void()> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* fn_ = nullptr;  // the job of the current run()
  uint64_t job_ = 0;                              // counts run() calls: a worker runs each job once
  int pending_ = 0;                               // workers not yet done with the current job
  bool stop_ = false;
  std::exception_ptr first_error_;
  std::vector<std::thread> workers_;
};

}  // namespace nanovllm
