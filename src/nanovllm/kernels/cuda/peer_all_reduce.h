// One-shot all-reduce of small bf16 messages over peer memory (NVLink), for the tensor-parallel ranks of
// one process (docs/tensor_parallel.md, section 6). NCCL's all-reduce costs ~11 us inside a CUDA graph for
// the 8 KiB of a bs=1 decode step, 73 times a step on an 8B model; this one is a copy, one flag exchange
// and N peer reads.
//
// Each rank owns, in its GPU's memory, a staging area [2][max_bytes] (two generations alternate), a flag
// array [kMaxBlocks][kMaxRanks] that the peers write, and its generation counter. A call on rank r
// (CTA b handles slice b of the message):
//   1. copies its slice of `data` into its staging area of generation parity g & 1,
//   2. writes g + 1 into flag [b][r] of every peer (release, system scope) and waits until every peer's
//      flag [b][p] in its own array reaches g + 1 (acquire),
//   3. sums the N ranks' staged slices in rank order in fp32 and writes bf16 to `data`: every rank gets
//      bitwise the same result, run after run.
// The CTA that finishes last advances the generation. Reuse is safe with two staging areas: a rank starts
// generation g + 2 (same parity as g) only after its call g + 1 has seen every peer's flags of g + 1,
// which the peers write after their call g (every read of generation g's staging) has completed.
// Addresses are fixed at construction, so calls are captured in CUDA graphs; the counter lives in device
// memory, so graph replays advance it.
//
// Every rank must make the same calls with the same sizes in the same order (SPMD, as NCCL). A rank that
// never arrives would leave the others spinning: abort() (the group's failure path) makes every waiting
// and later call return without waiting (the results are then garbage, and the step is failed anyway).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace nanovllm::cuda_ops {

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  static constexpr int kMaxBlocks = 64;
  static constexpr int64_t kMaxHidden = 16384;  // the fused kernel keeps a row in registers
  struct KernelParams;  // the kernels' view of the buffers (peer_all_reduce.cu)

  // True when every pair of devices 0..size-1 can access each other's memory (size >= 2).
  static bool supported(int size);

  // Buffers for ranks 0..size-1 on devices 0..size-1, messages up to `max_bytes`; enables peer access
  // between every pair. Throws nanovllm::Error when !supported(size) or size > kMaxRanks.
  PeerAllReduce(int size, size_t max_bytes);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  size_t max_bytes() const { return max_bytes_; }
  // Whether all_reduce_sum_bf16 takes a message of `numel` bf16: numel % 8 == 0, at most max_bytes. It
  // depends on the size alone, so every rank makes the same choice for the same call.
  bool fits(int64_t numel) const;

  // data [numel] bf16 on rank `rank`'s device <- the rank-order sum of every rank's data, enqueued on
  // `stream` (the rank's device must be current). Requires fits(numel) and 16-byte aligned data. Launched
  // without PDL: with it the decoder measured no faster (8B bs=1 TP2: 3.168 / 3.032 ms with, 3.101 / 3.095
  // without; docs/experiments.md, "Peer all-reduce launched with PDL").
  void all_reduce_sum_bf16(int rank, void* data, int64_t numel, cudaStream_t stream);

  // Whether all_reduce_add_rms_norm_bf16 takes [rows, hidden]: fits(rows * hidden), hidden a multiple of 8
  // up to kMaxHidden.
  bool fits_rows(int64_t rows, int64_t hidden) const;

  // x [rows, hidden] bf16 holds this rank's partial sums; then, on every rank: residual += the sum over
  // ranks (rounded to bf16 first, as all_reduce_sum_bf16 returns it), x = rms_norm(residual) * weight —
  // all_reduce_sum_bf16 followed by ops::add_rms_norm in one kernel (the same residual bits, x within a
  // bf16 ulp; the same bits on every rank). residual
  // [rows, hidden], weight [hidden] bf16.
  void all_reduce_add_rms_norm_bf16(int rank, void* x, void* residual, const void* weight, int64_t rows,
                                    int64_t hidden, float eps, cudaStream_t stream);

  // Waiting and later calls return without waiting for their peers (the group failed). Thread-safe.
  void abort();

 private:
  struct Rank {
    void* staging = nullptr;    // [2][max_bytes] on the rank's device
    uint32_t* flags = nullptr;  // [kMaxBlocks][kMaxRanks], written by the peers
    uint32_t* state = nullptr;  // {generation, CTAs finished in the current call}
  };
  KernelParams params(int rank) const;

  std::vector<Rank> ranks_;
  size_t max_bytes_ = 0;
  volatile int* abort_flag_ = nullptr;  // pinned, mapped: the kernels poll it while they wait
};

}  // namespace nanovllm::cuda_ops
