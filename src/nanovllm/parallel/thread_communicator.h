// ThreadCommunicator: a tensor-parallel group whose ranks are threads of one process (the CPU backend's
// TP simulation). Ranks exchange host pointers through a shared ThreadCommGroup and meet at a barrier.
// The reduction order is fixed — every element is summed over ranks 0, 1, ..., N-1 — so the result is
// bitwise the same on every rank and from run to run (NCCL's ring order is not; see the doc).
//
// A rank that fails (an exception in its forward) calls group.abort(): the other ranks' pending and later
// collectives then throw instead of waiting forever for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nanovllm/kernels/communicator.h"

namespace nanovllm {

// State shared by the ranks of one group; create once, hand one ThreadCommunicator to each rank thread.
class ThreadCommGroup {
 public:
  explicit ThreadCommGroup(int size);
  int size() const { return size_; }
  // Wakes every rank waiting in a collective with an error; later collectives throw at once.
  void abort();

 private:
  friend class ThreadCommunicator;
  void arrive_and_wait();  // a reusable barrier over all ranks; throws once aborted

  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  // Published by each rank for the collective in flight.
  std::vector<const void*> sources_;
  std::vector<int64_t> counts_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadCommGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(TensorView data, ops::Stream s = {}) override;  // F32; `s` unused
  void all_gather(TensorView in, TensorView out, ops::Stream s = {}) override;

 private:
  // Publishes this rank's pointer and count, waits for all, and checks the counts agree.
  void publish(const void* src, int64_t count, const char* op);

  std::shared_ptr<ThreadCommGroup> group_;
  int rank_;
};

}  // namespace nanovllm
