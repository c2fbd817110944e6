// Reading a tensor back to host memory on either backend, for observers off the hot path (layer taps).
// Its own header rather than ops.h: not a kernel, and nothing on the hot path may call it.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

// Copies x's bytes (x.nbytes(), x contiguous) into host memory `dst` once the work issued on s before it is
// done, and returns when they are there (on CUDA it waits for the stream).
void copy_to_host(void* dst, TensorView x, Stream s = {});

}  // namespace nanovllm::ops
