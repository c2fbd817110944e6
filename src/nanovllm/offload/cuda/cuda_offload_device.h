// The CUDA offload device: the runner's compute stream, one non-blocking stream per copy queue,
// CUDA events (no timing), cudaMemcpyAsync, device memory from cuda_allocator and pinned host memory.
#pragma once

#include <memory>

#include <cuda_runtime.h>

#include "nanovllm/kernels/ops.h"
#include "nanovllm/offload/offload_device.h"

namespace nanovllm {

// `compute` is the runner's stream and kernel context (not owned); the device owns the streams and events
// it creates.
std::unique_ptr<OffloadDevice> make_cuda_offload_device(int device, ops::Stream compute);

}  // namespace nanovllm
