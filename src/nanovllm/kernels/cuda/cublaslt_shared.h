// The cuBLASLt handle and workspace a device context's matmuls share (linear.cu owns them: DeviceContext::op_state,
// created at the first use, so run an eager step before capturing graphs). One stream at a time uses them, as
// every op state of the context. Host C++ only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cublasLt.h>

#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

struct CublasLtShared {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // [workspace_bytes]
  size_t workspace_bytes = 0;
};

// The context of `s`'s handle and workspace.
CublasLtShared cublaslt_shared(ops::Stream s);

// The largest power of two up to 256 that divides p's address: part of a cached algorithm's key (cuBLASLt's
// heuristics depend on the operands' alignment).
inline int pointer_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % static_cast<uintptr_t>(al)) != 0) al >>= 1;
  return al;
}

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
