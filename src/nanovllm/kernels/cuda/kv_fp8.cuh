// The fp8 KV cache's row format on the device (kernels/kv_cache.h has the contract and the CPU reference): one
// (slot, KV head) row = D e4m3 codes and one f32 scale; element = code x scale. Quantization of a row with
// max |x| = amax: scale = amax / 448 (1 when 0), code = cvt.rn.satfinite.e4m3(x / scale) — IEEE f32 division
// and round-to-nearest-even with saturation, the CPU's bits (f32_to_fp8_e4m3).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace nanovllm::cuda_ops {

__device__ __forceinline__ float fp8_kv_row_scale(float amax) {
  const float scale = amax / 448.0f;
  return scale > 0.0f ? scale : 1.0f;
}

__device__ __forceinline__ uint8_t fp8_e4m3_code(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float fp8_e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}

// 8 codes (a uint2) x scale as 8 bf16 (a uint4): the attention kernels' dequantized K / V tile rows. Each element is
// the f32 product code x scale rounded once to bf16 (the tensor-core inputs), so a kernel reading an fp8 cache sees
// the CPU's dequantized values to bf16 rounding (relative 2^-9).
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 codes, float scale) {
  const uint8_t* c = reinterpret_cast<const uint8_t*>(&codes);
  uint4 out;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    o[i] = __floats2bfloat162_rn(fp8_e4m3_value(c[2 * i]) * scale, fp8_e4m3_value(c[2 * i + 1]) * scale);
  return out;
}

// A row's scale by a 4-byte cp.async (the tensor-core kernels stage codes and scales asynchronously, then
// dequantize in shared memory with fp8x8_to_bf16x8); `valid == false` writes 0 (a zero-filled row of codes x 0 = 0).
__device__ __forceinline__ void cp_async4_zfill(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

}  // namespace nanovllm::cuda_ops
