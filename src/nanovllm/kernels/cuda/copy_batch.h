// CUDA kernel of kernels/copy_ops.h (validated by the op entry point).
#pragma once

#include <span>

#include "nanovllm/kernels/copy_ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void copy_batch(std::span<const ops::ByteCopy> copies, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif
