// What this binary and machine can run. In kernels/, the lowest layer that knows whether CUDA was built
// in: the CUDA build defines cuda_device_available in kernels/cuda/cuda_memory.cpp, device.cpp otherwise.
#pragma once

namespace nanovllm {

bool cuda_device_available();  // false when built without CUDA or no GPU present

}  // namespace nanovllm
