// Input ids fed on the device from the previous step's samples (the engine's async scheduling: step
// N + 1 is launched before the host has read step N's tokens), and the step's packed inputs staged from
// pinned host memory by a kernel.
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/sampling.h"

namespace nanovllm::cuda_ops {
namespace {

__global__ void feed_sampled_tokens_kernel(int32_t* __restrict__ ids, int64_t n, const int32_t* __restrict__ sampled) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n && ids[i] < 0) ids[i] = sampled[-1 - ids[i]];
}

// One word per thread; blockIdx.y 0: the step's inputs (fed ids resolved), 1: the second region. src
// is host memory read across PCIe, dst device memory.
// PDL (pdl.cuh): the prologue reads only the pinned staging, which the host filled before the launch,
// so that PCIe round trip overlaps the predecessor (the previous step's sampling, which triggers at its
// start). The sampled ids and every write come after the wait. No early trigger: the kernels after it
// read what it writes.
__global__ void stage_step_inputs_kernel(int32_t* __restrict__ dst, const int32_t* __restrict__ src, int64_t n,
                                         int64_t ids_begin, int64_t ids_end, const int32_t* __restrict__ sampled,
                                         int32_t* __restrict__ dst2, const int32_t* __restrict__ src2, int64_t n2) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool second = blockIdx.y == 1;
  const bool in_range = i < (second ? n2 : n);
  int32_t v = in_range ? (second ? src2[i] : src[i]) : 0;
  pdl_wait();
  if (!in_range) return;
  if (second) {
    dst2[i] = v;
    return;
  }
  if (sampled != nullptr && v < 0 && i >= ids_begin && i < ids_end) v = sampled[-1 - v];
  dst[i] = v;
}

}  // namespace

void stage_step_inputs(int32_t* dst, const int32_t* src_mapped, int64_t n, int64_t ids_begin, int64_t num_ids,
                       const int32_t* sampled, StagedWords extra, ops::Stream stream) {
  const int64_t most = n > extra.words ? n : extra.words;
  if (most == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>((most + kThreads - 1) / kThreads), extra.words > 0 ? 2 : 1);
  launch_pdl(stage_step_inputs_kernel, grid, dim3(kThreads), 0, stream, dst, src_mapped, n, ids_begin,
             ids_begin + num_ids, sampled, extra.dst, extra.src_mapped, extra.words);
  CUDA_CHECK_LAUNCH();
}

void feed_sampled_tokens(int32_t* ids, int64_t n, const int32_t* sampled, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  feed_sampled_tokens_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(ids, n,
                                                                                                          sampled);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
