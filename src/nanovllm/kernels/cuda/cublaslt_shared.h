// The cuBLASLt handle and workspace a device context's matmuls share (linear.cu owns them: DeviceContext::op_state,
// created at the first use, so run an eager step before capturing graphs). One stream at a time uses them, as
// every op state of the context. Host C++ only.
#pragma once

#include <cstddef>

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

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
