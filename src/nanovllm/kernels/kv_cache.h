// The paged KV cache's element formats (docs/kv_cache.md). A layer's K (or V) cache is [NB, BS, Hk, D]
// elements of the activation dtype, or, with `kv_cache_dtype fp8`, e4m3 codes [NB, BS, Hk, D] plus one fp32
// scale per (slot, KV head) row [NB, BS, Hk]: element d of the row is fp8_e4m3_to_f32(code[d]) x scale (one
// f32 product). Every op that reads or writes a cache takes a KvCacheTensor; a plain TensorView converts to one
// (a cache of the activation dtype), so callers of unquantized caches pass their views unchanged.
//
// Quantization of one row x[0, D) (the CPU reference of every K/V store: the qkv prologue, the decode
// append; CUDA's kernels/cuda/kv_fp8.cuh computes the same bits):
//   amax = max_d |x[d]|; scale = amax / 448 in f32, or 1 when that is 0 (a zero row: all codes 0);
//   code[d] = e4m3(x[d] / scale) in f32, round to nearest even, saturating at +-448 (f32_to_fp8_e4m3).
#pragma once

#include <cmath>
#include <cstdint>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/error.h"
#include "nanovllm/core/tensor.h"

namespace nanovllm {

struct KvCacheTensor : TensorView {
  TensorView scale;  // [NB, BS, Hk] f32 (the codes' shape without D) when the codes are F8E4M3; else undefined

  KvCacheTensor() = default;
  KvCacheTensor(TensorView t) : TensorView(t) {}  // NOLINT: implicit, a cache of the activation dtype
  KvCacheTensor(TensorView codes, TensorView scales) : TensorView(codes), scale(scales) {}

  bool fp8() const { return dtype() == DType::kF8E4M3; }
  // TensorView's views, with the scales viewed alike (they hide TensorView's, so a view of a cache stays one).
  // reshape: the same last dimension D.
  KvCacheTensor reshape(Shape s) const {
    if (!fp8()) return TensorView::reshape(s);
    NANOVLLM_CHECK(s.ndim >= 2 && s[-1] == dim(-1), "KvCacheTensor::reshape ", shape().str(), " -> ", s.str(),
                   " must keep the row length");
    Shape rows = s;
    rows.ndim -= 1;
    return {TensorView::reshape(s), scale.reshape(rows)};
  }
  KvCacheTensor slice_rows(int64_t begin, int64_t end) const {
    if (!fp8()) return TensorView::slice_rows(begin, end);
    return {TensorView::slice_rows(begin, end), scale.slice_rows(begin, end)};
  }
  // The same cache as [rows, 1, 1, D] (row = slot x Hk + head): a cache whose every key row is a block of one
  // token of one head (sparse decode attends gathered rows this way).
  KvCacheTensor rows_as_blocks() const { return reshape({numel() / dim(-1), 1, 1, dim(-1)}); }
};

// Bytes of one (token, KV head) row of D elements of dtype t, its scale included (fp8).
inline int64_t kv_cache_row_bytes(DType t, int64_t head_dim) {
  return head_dim * static_cast<int64_t>(dtype_size(t)) + (t == DType::kF8E4M3 ? 4 : 0);
}

// The quantization above: codes[0, D) and the row's scale from x[0, D).
inline float fp8_kv_row_scale(float amax) {
  const float scale = amax / kFp8E4M3Max;
  return scale > 0.0f ? scale : 1.0f;
}
inline float quantize_fp8_kv_row(const float* x, int64_t D, uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t d = 0; d < D; ++d) amax = std::fmax(amax, std::fabs(x[d]));
  const float scale = fp8_kv_row_scale(amax);
  for (int64_t d = 0; d < D; ++d) codes[d] = f32_to_fp8_e4m3(x[d] / scale);
  return scale;
}
inline void dequantize_fp8_kv_row(const uint8_t* codes, float scale, int64_t D, float* x) {
  for (int64_t d = 0; d < D; ++d) x[d] = fp8_e4m3_to_f32(codes[d]) * scale;
}

// One K or V cache of `rows` rows of D elements laid out in one region: the elements, then (fp8) the rows'
// f32 scales, each part starting 256-byte aligned. Bytes of such a region:
inline size_t kv_cache_region_bytes(DType t, int64_t rows, int64_t head_dim) {
  const auto aligned = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t elements = aligned(static_cast<size_t>(rows * head_dim) * dtype_size(t));
  return elements + (t == DType::kF8E4M3 ? aligned(static_cast<size_t>(rows) * 4) : 0);
}
// The region at `base` as a cache tensor of `shape` (last dimension D; rows = the product of the others).
inline KvCacheTensor kv_cache_region(void* base, DType t, Shape shape, Device dev) {
  const TensorView elements(base, t, shape, dev);
  if (t != DType::kF8E4M3) return elements;
  Shape rows = shape;
  rows.ndim -= 1;
  const size_t offset = kv_cache_region_bytes(DType::kU8, rows.numel(), shape[-1]);  // the codes, aligned
  return {elements, TensorView(static_cast<char*>(base) + offset, DType::kF32, rows, dev)};
}

}  // namespace nanovllm
