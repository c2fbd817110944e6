// Average time of a launch sequence on a stream, by CUDA events: one untimed warm-up call (algorithm
// selection, workspaces), then `reps` calls between two events. For the device peaks and the linear
// dispatch's timing of long kernels.
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

// Per-call time of `fn` as a decode graph runs it: `reps` back-to-back calls captured in one CUDA graph
// (no host launch gaps; PDL edges where the kernels carry the attribute), the best of `rounds` replays.
// One eager call first (algorithm selection, workspaces: nothing may allocate inside the capture).
// `st` must not be capturing, and must not be the legacy default stream (it cannot be captured).
template <typename F>
double graph_min_ms(cudaStream_t st, int reps, int rounds, F&& fn) {
  fn();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) fn();
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaGraphLaunch(exec, st));  // first replay: upload
  float best = 1e30f;
  for (int r = 0; r < rounds; ++r) {
    CUDA_CHECK(cudaEventRecord(a, st));
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaEventRecord(b, st));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = ms < best ? ms : best;
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  return best / reps;
}

}  // namespace nanovllm::cuda_ops
