// Input ids fed on the device from the previous step's samples (the engine's async scheduling: step
// N + 1 is launched before the host has read step N's tokens).
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/sampling.h"

namespace nanovllm::cuda_ops {
namespace {

__global__ void feed_sampled_tokens_kernel(int32_t* __restrict__ ids, int64_t n, const int32_t* __restrict__ sampled) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n && ids[i] < 0) ids[i] = sampled[-1 - ids[i]];
}

}  // namespace

void feed_sampled_tokens(int32_t* ids, int64_t n, const int32_t* sampled, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  feed_sampled_tokens_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(ids, n,
                                                                                                          sampled);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
