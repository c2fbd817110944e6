#include "nanovllm/parallel/thread_communicator.h"

#include <cstring>
#include <utility>

#include "nanovllm/core/error.h"

namespace nanovllm {

ThreadCommGroup::ThreadCommGroup(int size) : size_(size) {
  NANOVLLM_CHECK(size >= 1, "tensor-parallel group size must be >= 1, got ", size);
  sources_.resize(static_cast<size_t>(size));
  counts_.resize(static_cast<size_t>(size));
}

void ThreadCommGroup::abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void ThreadCommGroup::arrive_and_wait() {
  std::unique_lock lock(mu_);
  NANOVLLM_CHECK(!aborted_, "tensor-parallel group aborted: another rank failed");
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  NANOVLLM_CHECK(generation_ != generation, "tensor-parallel group aborted: another rank failed");
}

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadCommGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  NANOVLLM_CHECK(group_ != nullptr, "ThreadCommunicator needs a group");
  NANOVLLM_CHECK(rank >= 0 && rank < group_->size(), "rank ", rank, " outside [0, ", group_->size(), ")");
}

void ThreadCommunicator::publish(const void* src, int64_t count, const char* op) {
  ThreadCommGroup& g = *group_;
  {
    std::lock_guard lock(g.mu_);
    g.sources_[rank_] = src;
    g.counts_[rank_] = count;
  }
  g.arrive_and_wait();  // every rank's pointer is published
  int64_t other = count;
  for (int64_t c : g.counts_)
    if (c != count) other = c;
  if (other != count) {
    g.arrive_and_wait();  // nobody publishes the next collective while another rank still reads counts_
    NANOVLLM_FAIL(op, ": rank ", rank_, " has ", count, " elements, another rank ", other,
                  " (every rank must pass the same size)");
  }
}

void ThreadCommunicator::all_reduce_sum(TensorView data, ops::Stream) {
  NANOVLLM_CHECK(data.dtype() == DType::kF32, "all_reduce_sum: the thread communicator sums f32, got ",
                 dtype_name(data.dtype()));
  const int64_t n = data.numel();
  publish(data.data(), n, "all_reduce_sum");
  // Every rank sums all of it in rank order 0..N-1 (N times the work of a reduce-scatter, but this is the
  // CPU simulation, and it keeps every rank's result bitwise identical without a shared buffer).
  std::vector<float> sum(static_cast<size_t>(n), 0.f);
  for (const void* src : group_->sources_) {
    const float* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) sum[i] += s[i];
  }
  group_->arrive_and_wait();  // everyone has read every input: now each rank may overwrite its own
  std::memcpy(data.data(), sum.data(), sum.size() * sizeof(float));
}

void ThreadCommunicator::all_gather(TensorView in, TensorView out, ops::Stream) {
  NANOVLLM_CHECK(in.dtype() == out.dtype(), "all_gather: in is ", dtype_name(in.dtype()), ", out is ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(out.numel() == in.numel() * size(), "all_gather: out has ", out.numel(), " elements, expected ",
                 size(), " x ", in.numel());
  publish(in.data(), in.numel(), "all_gather");
  char* dst = static_cast<char*>(out.data());
  for (const void* src : group_->sources_) {
    std::memcpy(dst, src, in.nbytes());
    dst += in.nbytes();
  }
  group_->arrive_and_wait();  // the inputs stay untouched until every rank has copied them
}

}  // namespace nanovllm
