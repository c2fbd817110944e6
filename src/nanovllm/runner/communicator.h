// Communicator: one rank's handle on its tensor-parallel group's collectives (docs/tensor_parallel.md).
// Every rank of a group calls the same collectives with the same sizes in the same order (SPMD, as NCCL
// requires); a call returns when this rank's result is complete. Implementations: ThreadCommunicator
// (ranks as threads of one process: the CPU backend's TP simulation, CI), and, next, NCCL (one GPU per
// rank, enqueued on the runner's stream and captured in the decode CUDA graphs) with a one-shot
// NVLink all-reduce for small messages.
#pragma once

#include "nanovllm/core/tensor.h"

namespace nanovllm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data <- the element-wise sum of every rank's data, identical on every rank (row-parallel linears,
  // vocab-parallel embedding). Throws nanovllm::Error for an unsupported dtype or sizes that differ
  // between ranks (then on every rank).
  virtual void all_reduce_sum(TensorView data) = 0;

  // out <- every rank's `in`, concatenated in rank order: out.numel() == size() * in.numel(), same dtype
  // (vocab-parallel LM head logits).
  virtual void all_gather(TensorView in, TensorView out) = 0;
};

}  // namespace nanovllm
