// NcclCommunicator: one GPU rank's collectives through NCCL (docs/tensor_parallel.md, section 5). The
// calls enqueue on the ops::Stream's CUDA stream and return at once (no host sync), so they are captured
// into the decode CUDA graphs like any kernel. bf16 and f32.
//
// NcclGroup makes the communicators of one host's ranks (ncclCommInitAll over devices 0..N-1), owns
// them, and aborts them all when a rank fails so that the others' pending collectives return instead of
// spinning forever.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include <nccl.h>

#include "nanovllm/kernels/communicator.h"

namespace nanovllm {

// An NCCL call that fails is a dead peer or a bug: print the call with file:line and abort (as CUDA_CHECK).
#define NCCL_CHECK(call)                                                                            \
  do {                                                                                              \
    const ncclResult_t nanovllm_nccl_res_ = (call);                                                 \
    if (nanovllm_nccl_res_ != ncclSuccess) [[unlikely]] {                                           \
      std::fprintf(stderr, "%s:%d: NCCL error %s in %s\n", __FILE__, __LINE__,                      \
                   ncclGetErrorString(nanovllm_nccl_res_), #call);                                  \
      std::abort();                                                                                 \
    }                                                                                               \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(TensorView data, ops::Stream s = {}) override;  // BF16 or F32, on the stream
  void all_gather(TensorView in, TensorView out, ops::Stream s = {}) override;

 private:
  ncclComm_t comm_;
  int rank_, size_;
};

class NcclGroup {
 public:
  // Communicators for devices 0..size-1 of this host (rank r on device r). Throws when fewer devices exist.
  explicit NcclGroup(int size);
  ~NcclGroup();  // ncclCommDestroy (or nothing after abort())
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator* rank(int r) { return ranks_[static_cast<size_t>(r)].get(); }
  // ncclCommAbort on every communicator: collectives in flight return with an error. Once only.
  void abort();

 private:
  std::vector<ncclComm_t> comms_;
  std::vector<std::unique_ptr<NcclCommunicator>> ranks_;
  std::mutex mu_;  // abort() may come from several failing rank threads at once
  bool aborted_ = false;
};

}  // namespace nanovllm
