// Device helpers shared by the CUDA kernels: typed element access (F32/BF16/F16, chosen at run time for
// the generic paths), 8 x bf16 <-> 8 x f32 vector conversion (16-byte accesses), warp/block reductions.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::cuda_ops {

inline cudaStream_t stream_of(ops::Stream s) { return static_cast<cudaStream_t>(s.cuda_stream); }

// Float dtype codes usable in device code (DType values, as ints).
enum : int { kDtF32 = static_cast<int>(DType::kF32), kDtF16 = static_cast<int>(DType::kF16),
             kDtBF16 = static_cast<int>(DType::kBF16) };
inline int dt(const TensorView& t) { return static_cast<int>(t.dtype()); }

__device__ __forceinline__ float load_f32(const void* p, int dtype, int64_t i) {
  if (dtype == kDtBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (dtype == kDtF16) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_f32(void* p, int dtype, int64_t i, float v) {
  if (dtype == kDtBF16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else if (dtype == kDtF16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<float*>(p)[i] = v;
}

// 8 bf16 packed in a uint4 (one 16-byte access) <-> 8 floats.
__device__ __forceinline__ void bf16x8_to_f32(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ uint4 f32_to_bf16x8(const float (&f)[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `red` is __shared__ float[32]. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `red` may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? red[lane] : 0.0f;
  return warp_sum(t);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline unsigned ceil_div_u(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace nanovllm::cuda_ops
