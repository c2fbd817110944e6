// The fp8 KV cache's row format on the device (kernels/kv_cache.h has the contract and the CPU reference): one
// (slot, KV head) row = D e4m3 codes and one f32 scale; element = code x scale. Quantization of a row with
// max |x| = amax: scale = amax / 448 (1 when 0), code = cvt.rn.satfinite.e4m3(x / scale) — IEEE f32 division
// and round-to-nearest-even with saturation, the CPU's bits (f32_to_fp8_e4m3).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

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

// Two codes (the low 16 bits, the first in the low byte) as f16x2 (the first in the low half), exactly: e4m3 is a
// subset of f16. One cvt.rn.f16x2.e4m3x2 on sm_89+ (the tensor-core decode's conversion, no float math).
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  return uint32_t{h.x} | (uint32_t{h.y} << 16);
}

// 8 codes (a uint2) x scale as 8 bf16 (a uint4): the prefill and SIMT kernels' dequantized K / V tile rows. Each
// element is the f32 product code x scale rounded once to bf16 (the tensor-core inputs), so a kernel reading an fp8
// cache sees the CPU's dequantized values to bf16 rounding (relative 2^-9). Codes convert two at a time to f16x2
// (exact), then to f32.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 codes, float scale) {
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t h = fp8x2_to_f16x2((i < 2 ? codes.x : codes.y) >> (16 * (i & 1)));
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    o[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  return out;
}

// Elements [d, d + kVec) of row `row` (D elements per row; row = slot x Hk + head) of a K / V cache as f32: for an fp8
// cache (K = uint8_t codes, `scale` its rows' scales) code x scale in one f32 product, the CPU's load_kv_row bits;
// otherwise the element converted (`scale` unused). kVec 8 loads the 8 elements at once (one 8-byte load of codes, one
// 16-byte load of bf16): the caller checks D % 8 == 0 and the alignment. The pattern estimators read keys this way.
template <typename K, int kVec>
__device__ __forceinline__ void load_kv_vec(const K* cache, const float* scale, int64_t row, int D, int d,
                                            float (&x)[kVec]) {
  const K* p = cache + row * D + d;
  if constexpr (std::is_same_v<K, uint8_t>) {
    const float s = scale[row];
    if constexpr (kVec == 8) {
      const uint2 codes = *reinterpret_cast<const uint2*>(p);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t h = fp8x2_to_f16x2((i < 2 ? codes.x : codes.y) >> (16 * (i & 1)));
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        x[2 * i] = __fmul_rn(f.x, s);
        x[2 * i + 1] = __fmul_rn(f.y, s);
      }
    } else {
#pragma unroll
      for (int t = 0; t < kVec; ++t) x[t] = __fmul_rn(fp8_e4m3_value(p[t]), s);
    }
  } else if constexpr (kVec == 8 && std::is_same_v<K, __nv_bfloat16>) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int t = 0; t < kVec; ++t) x[t] = static_cast<float>(p[t]);
  }
}

// A row's scale by a 4-byte cp.async (the tensor-core kernels stage codes and scales asynchronously);
// `valid == false` writes 0 (a zero-filled row of codes x 0 = 0).
__device__ __forceinline__ void cp_async4_zfill(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

}  // namespace nanovllm::cuda_ops
