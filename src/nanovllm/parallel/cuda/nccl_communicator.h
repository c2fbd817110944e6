// NcclCommunicator: one GPU rank's collectives through NCCL (docs/tensor_parallel.md, section 5), and
// small bf16 all-reduces (decode steps) through the one-shot peer-memory kernel (cuda_ops::PeerAllReduce)
// when every pair of GPUs has peer access. The calls enqueue on the ops::Stream's CUDA stream and return at
// once (no host sync), so they are captured into the decode CUDA graphs like any kernel. bf16 and f32.
//
// NcclGroup makes the communicators of one host's ranks (ncclCommInitAll over devices 0..N-1) and the
// peer all-reduce buffers, owns them, and aborts them all when a rank fails so that the others' pending
// collectives return instead of spinning forever.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include <nccl.h>

#include "nanovllm/kernels/communicator.h"
#include "nanovllm/kernels/cuda/peer_all_reduce.h"

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
  // `peer`: the group's peer all-reduce, or null (NCCL for everything).
  NcclCommunicator(ncclComm_t comm, int rank, int size, cuda_ops::PeerAllReduce* peer)
      : comm_(comm), rank_(rank), size_(size), peer_(peer) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(TensorView data, ops::Stream s = {}) override;  // BF16 or F32, on the stream
  // One peer-memory kernel when the message fits it (bf16), else NCCL + ops::add_rms_norm.
  void all_reduce_add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps,
                               ops::Stream s = {}) override;
  void all_gather(TensorView in, TensorView out, ops::Stream s = {}) override;

 private:
  ncclComm_t comm_;
  int rank_, size_;
  cuda_ops::PeerAllReduce* peer_;
};

class NcclGroup {
 public:
  // Communicators for devices 0..size-1 of this host (rank r on device r). Throws when fewer devices exist.
  // Bf16 all-reduces of at most `peer_bytes` go through the peer-memory kernel where the GPUs allow it
  // (0: NCCL only).
  NcclGroup(int size, size_t peer_bytes);
  // This host's `local` ranks of a group of `world` ranks spread over processes: global ranks
  // first_rank..first_rank+local-1 on devices 0..local-1, joined through `id` (ncclGetUniqueId on node 0,
  // sent to the others). Blocks until every process has joined. NCCL only (peer memory is per process).
  NcclGroup(int local, int world, int first_rank, const ncclUniqueId& id);
  ~NcclGroup();  // ncclCommDestroy (or nothing after abort())
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator* rank(int r) { return ranks_[static_cast<size_t>(r)].get(); }  // local rank r (device r)
  // ncclCommAbort on every communicator: collectives in flight return with an error. Once only.
  void abort();

 private:
  std::vector<ncclComm_t> comms_;
  std::unique_ptr<cuda_ops::PeerAllReduce> peer_;  // null: no peer access between some pair of GPUs
  std::vector<std::unique_ptr<NcclCommunicator>> ranks_;
  std::mutex mu_;  // abort() may come from several failing rank threads at once
  bool aborted_ = false;
};

}  // namespace nanovllm
