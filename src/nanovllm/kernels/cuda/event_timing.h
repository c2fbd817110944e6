// Average time of a launch sequence on a stream, by CUDA events: one untimed warm-up call (algorithm
// selection, workspaces), then `reps` calls between two events. For dispatch timing and device peaks.
#pragma once

#include <cuda_runtime.h>

#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm::cuda_ops {

template <typename F>
double average_ms(cudaStream_t st, int reps, F&& fn) {
  fn();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, st));
  for (int i = 0; i < reps; ++i) fn();
  CUDA_CHECK(cudaEventRecord(b, st));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return ms / reps;
}

}  // namespace nanovllm::cuda_ops
