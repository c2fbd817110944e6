// What this binary and machine can run. In kernels/, the lowest layer that knows whether CUDA was built
// in: the CUDA build defines cuda_device_available in kernels/cuda/cuda_memory.cpp, device.cpp otherwise.
#pragma once

#include "nanovllm/core/backend.h"

namespace nanovllm {

bool cuda_device_available();  // false when built without CUDA or no GPU present
Backend default_backend();     // cuda when cuda_device_available(), else cpu

}  // namespace nanovllm
