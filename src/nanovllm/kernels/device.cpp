#include "nanovllm/kernels/device.h"

namespace nanovllm {

#if !NANOVLLM_WITH_CUDA
bool cuda_device_available() { return false; }
#endif

}  // namespace nanovllm
