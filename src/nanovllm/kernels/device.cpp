#include "nanovllm/kernels/device.h"

namespace nanovllm {

Backend default_backend() { return cuda_device_available() ? Backend::kCuda : Backend::kCpu; }

#if !NANOVLLM_WITH_CUDA
bool cuda_device_available() { return false; }
#endif

}  // namespace nanovllm
