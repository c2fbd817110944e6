// Row conversion helpers for the CPU kernels: any float dtype <-> fp32 scratch.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "nanovllm/core/dtype.h"

namespace nanovllm::cpu {

// dst[0, n) = src (element offset `first`) as fp32.
inline void load_row_f32(const void* src, DType t, int64_t first, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(src) + first, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + first;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + first;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default: NANOVLLM_FAIL("load_row_f32: ", dtype_name(t), " is not a float type");
  }
}

// dst (element offset `first`) = src[0, n) rounded to the dtype (nearest even).
inline void store_row_f32(const float* src, int64_t n, void* dst, DType t, int64_t first) {
  switch (t) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(dst) + first, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + first;
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + first;
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default: NANOVLLM_FAIL("store_row_f32: ", dtype_name(t), " is not a float type");
  }
}

// Per-thread scratch that grows and is reused across calls (no allocation in steady state).
inline float* scratch_f32(std::vector<float>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

}  // namespace nanovllm::cpu
