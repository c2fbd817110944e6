// CUDA_CHECK / CUBLAS_CHECK: a failed CUDA runtime or cuBLASLt call is a bug or a dead device (errors
// are sticky), so these print the failed call with file:line and abort rather than throw.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublasLt.h>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t nanovllm_cuda_err_ = (call);                                          \
    if (nanovllm_cuda_err_ != cudaSuccess) [[unlikely]] {                                   \
      std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", __FILE__, __LINE__,         \
                   cudaGetErrorName(nanovllm_cuda_err_), cudaGetErrorString(nanovllm_cuda_err_), \
                   #call);                                                                  \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

#define CUBLAS_CHECK(call)                                                                  \
  do {                                                                                      \
    const cublasStatus_t nanovllm_cublas_st_ = (call);                                      \
    if (nanovllm_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                        \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d in %s\n", __FILE__, __LINE__,            \
                   static_cast<int>(nanovllm_cublas_st_), #call);                           \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

// After a kernel launch: launch-configuration errors surface here (asynchronous faults surface at the
// next synchronising call).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
