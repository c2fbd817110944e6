#include "nanovllm/kernels/cuda/device_context.h"

#include <string>

#include <cuda_runtime.h>

#include "nanovllm/core/env.h"
#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm::cuda_ops {

DeviceContext::DeviceContext(int device) : device_(device) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  NANOVLLM_CHECK(device >= 0 && device < count, "CUDA device ", device, " does not exist (", count, " present)");
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  options.pdl = environment().pdl;
  options.pdl_early_norm = environment().pdl_early_norm == 1;  // unset (-1): off outside decode graphs
}

DeviceContext::~DeviceContext() {
  // The states free device memory (cudaFree waits for the device), on this context's device.
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && current != device_) cudaSetDevice(device_);
  states_.clear();
  if (current != device_) cudaSetDevice(current);
}

DeviceContext& context_of(ops::Stream s) {
  NANOVLLM_CHECK(s.cuda_context != nullptr,
                 "CUDA op without a device context: pass the runner's cuda_ops::DeviceContext in ops::Stream");
  return *s.cuda_context;
}

}  // namespace nanovllm::cuda_ops
