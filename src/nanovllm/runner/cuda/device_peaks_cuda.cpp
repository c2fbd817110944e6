#include <chrono>
#include <vector>

#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/event_timing.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/runner/device_peaks.h"

namespace nanovllm {

DevicePeaks measure_device_peaks() {
  DevicePeaks p;
  if (!cuda_device_available()) return p;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  p.device_name = prop.name;
  p.memory_gib = static_cast<double>(prop.totalGlobalMem) / (1 << 30);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  const size_t copy_bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr, *h = nullptr;
  CUDA_CHECK(cudaMalloc(&a, copy_bytes));
  CUDA_CHECK(cudaMalloc(&b, copy_bytes));
  CUDA_CHECK(cudaMemsetAsync(a, 1, copy_bytes, s));
  const double d2d = cuda_ops::average_ms(s, 10, [&] { CUDA_CHECK(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice, s)); });
  p.copy_gbps = 2.0 * copy_bytes / (d2d * 1e6);  // each byte read once and written once
  const size_t host_bytes = size_t{256} << 20;
  CUDA_CHECK(cudaHostAlloc(&h, host_bytes, cudaHostAllocDefault));
  const double h2d = cuda_ops::average_ms(s, 5, [&] { CUDA_CHECK(cudaMemcpyAsync(a, h, host_bytes, cudaMemcpyHostToDevice, s)); });
  const double d2h = cuda_ops::average_ms(s, 5, [&] { CUDA_CHECK(cudaMemcpyAsync(h, a, host_bytes, cudaMemcpyDeviceToHost, s)); });
  p.h2d_gbps = host_bytes / (h2d * 1e6);
  p.d2h_gbps = host_bytes / (d2h * 1e6);

  // bf16 GEMM through ops::linear (cuBLASLt, fp32 accumulate): out[M, N] = in[M, K] W[N, K]^T.
  const int64_t n = 8192;
  const Device dev = Device::cuda(0);
  TensorView in(a, DType::kBF16, Shape{n, n}, dev), w(b, DType::kBF16, Shape{n, n}, dev);
  void* out_mem = nullptr;
  CUDA_CHECK(cudaMalloc(&out_mem, static_cast<size_t>(n * n * 2)));
  TensorView out(out_mem, DType::kBF16, Shape{n, n}, dev);
  // Small random-ish bf16 values (0x3c01 patterns would be 1.0x): fill with a byte pattern = finite bf16.
  CUDA_CHECK(cudaMemsetAsync(a, 0x3c, static_cast<size_t>(n * n * 2), s));
  CUDA_CHECK(cudaMemsetAsync(b, 0x3c, static_cast<size_t>(n * n * 2), s));
  cuda_ops::DeviceContext kernels(0);
  const ops::Stream os{s, &kernels};
  const double gemm = cuda_ops::average_ms(s, 10, [&] { ops::linear(out, in, w, TensorView(), os); });
  p.gemm_tflops = 2.0 * n * n * n / (gemm * 1e9);

  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaFree(out_mem));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  CUDA_CHECK(cudaFreeHost(h));
  CUDA_CHECK(cudaStreamDestroy(s));
  p.measured = true;
  return p;
}

}  // namespace nanovllm

namespace nanovllm {
size_t peak_device_memory_bytes() { return cuda_peak_allocated_bytes(); }
}  // namespace nanovllm
