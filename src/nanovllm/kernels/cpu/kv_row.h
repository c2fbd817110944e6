// One (slot, KV head) row of a paged K or V cache (kv_cache.h) as fp32, either format: the activation dtype
// converted, or fp8 codes x the row's scale. Row r of a [NB, BS, Hk, D] cache is slot x Hk + head.
#pragma once

#include <cstdint>

#include "nanovllm/kernels/cpu/row_io.h"
#include "nanovllm/kernels/kv_cache.h"

namespace nanovllm::cpu {

// dst[0, D) = cache row `row`.
inline void load_kv_row(const KvCacheTensor& cache, int64_t row, float* dst) {
  const int64_t D = cache.dim(-1);
  if (cache.fp8()) {
    dequantize_fp8_kv_row(cache.data_as<const uint8_t>() + row * D, cache.scale.data_as<const float>()[row], D, dst);
  } else {
    load_row_f32(cache.data(), cache.dtype(), row * D, D, dst);
  }
}

// Cache row `row` = src[0, D): rounded to the cache's dtype, or quantized (kv_cache.h) with its scale.
inline void store_kv_row(const float* src, const KvCacheTensor& cache, int64_t row) {
  const int64_t D = cache.dim(-1);
  if (cache.fp8()) {
    cache.scale.data_as<float>()[row] = quantize_fp8_kv_row(src, D, cache.data_as<uint8_t>() + row * D);
  } else {
    store_row_f32(src, D, cache.data(), cache.dtype(), row * D);
  }
}

}  // namespace nanovllm::cpu
