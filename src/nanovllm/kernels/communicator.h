// Communicator: one rank's handle on its tensor-parallel group's collectives (docs/tensor_parallel.md).
// Every rank of a group calls the same collectives with the same sizes in the same order (SPMD, as NCCL
// requires). Implementations: ThreadCommunicator (runner/: ranks as threads of one process, the CPU
// backend's TP simulation; returns when this rank's result is complete) and NcclCommunicator
// (runner/cuda/: one GPU per rank; enqueues on the stream and returns, capturable in CUDA graphs).
// It lives beside the ops because the decoder (model/) calls it between them.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data <- the element-wise sum of every rank's data, identical on every rank (row-parallel linears,
  // vocab-parallel embedding). Throws nanovllm::Error for an unsupported dtype or sizes that differ
  // between ranks (then on every rank). `s`: the stream to enqueue on (device communicators).
  virtual void all_reduce_sum(TensorView data, ops::Stream s = {}) = 0;

  // residual += the all-reduced x; x = rms_norm(residual) * weight: what follows every row-parallel
  // projection of the decoder. x, residual [T, H]; weight [H]. This is all_reduce_sum then
  // ops::add_rms_norm; a device communicator may fuse the two (the same math, up to a rounding).
  virtual void all_reduce_add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps,
                                       ops::Stream s = {}) {
    all_reduce_sum(x, s);
    ops::add_rms_norm(x, residual, weight, eps, s);
  }

  // out <- every rank's `in`, concatenated in rank order: out.numel() == size() * in.numel(), same dtype
  // (vocab-parallel LM head logits).
  virtual void all_gather(TensorView in, TensorView out, ops::Stream s = {}) = 0;
};

}  // namespace nanovllm
