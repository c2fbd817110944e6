// ops::copy_to_host on CUDA (kernels/host_copy.h): a stream-ordered D2H copy, then a wait for the stream.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::cuda_ops {

void copy_to_host(void* dst, TensorView x, ops::Stream s);

}  // namespace nanovllm::cuda_ops
