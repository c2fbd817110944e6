// Element types and the bf16/fp16 <-> fp32 conversions (host and device safe, no CUDA headers).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "nanovllm/core/error.h"

namespace nanovllm {

// kF8E4M3: OCP fp8 e4m3 ("e4m3fn": no infinities, NaN = 0x7f / 0xff, largest finite 448), the element of
// block-scaled FP8 checkpoints (docs/fp8.md); never an activation dtype.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: case DType::kF8E4M3: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// bf16 is the top half of an fp32; conversion rounds to nearest even, NaN stays NaN.
inline float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE half, round to nearest even, with subnormals, inf and NaN.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    exp = static_cast<uint32_t>(127 - 15 - e);
    return bits_float(sign | (exp << 23) | (mant << 13));
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;           // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;         // overflow (rounds to inf) or inf
  if (abs < 0x38800000u) {                               // subnormal half or zero
    if (abs < 0x33000000u) return sign;                  // below half of the smallest subnormal
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;                       // 14 + (113 - e) - 1 ... yields mantissa bits
    uint32_t half_m = m >> (shift - 0);
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
    return sign | static_cast<uint16_t>(half_m);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);        // round mantissa to 10 bits, nearest even
  r -= (127u - 15u) << 23;
  return sign | static_cast<uint16_t>(r >> 13);
}

// fp8 e4m3 (e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals m * 2^-9.
inline constexpr float kFp8E4M3Max = 448.0f;
inline float fp8_e4m3_to_f32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return bits_float(sign | 0x7fc00000u);  // NaN
  if (exp == 0) return bits_float(sign | float_bits(static_cast<float>(mant) * (1.0f / 512.0f)));
  return bits_float(sign | ((exp + 120) << 23) | (mant << 20));
}
// Round to nearest even; magnitudes past 448 saturate to +-448 (the quantizers scale into range, so only
// rounding noise gets there); NaN stays NaN.
inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7fu;
  if (abs < 0x3c800000u) {  // below 2^-6, the smallest normal: a multiple of 2^-9, from 0 to 8 (= 2^-6)
    const float x = bits_float(abs) * 512.0f;  // exact: a power-of-two scale
    uint32_t i = static_cast<uint32_t>(x);
    const float frac = x - static_cast<float>(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
    return sign | static_cast<uint8_t>(i);  // 8 is 0x08: exponent 1, mantissa 0
  }
  const uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1u);  // round the mantissa to 3 bits, nearest even
  const uint32_t exp = (r >> 23) - 120, mant = (r >> 20) & 0x7u;
  if (exp > 15 || (exp == 15 && mant == 7)) return sign | 0x7eu;  // 448
  return sign | static_cast<uint8_t>((exp << 3) | mant);
}

// Reads element i of a buffer of the given float type as fp32.
inline float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    default: NANOVLLM_FAIL("load_as_f32: ", dtype_name(t), " is not a float type");
  }
}

}  // namespace nanovllm
