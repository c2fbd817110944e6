#include "nanovllm/kernels/fp8_block.h"

#include <algorithm>
#include <cmath>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/error.h"

namespace nanovllm {

Shape fp8_scale_shape(const Shape& weight) {
  NANOVLLM_CHECK(weight.ndim == 2, "block-scaled fp8 weights are 2-D, got shape ", weight.str());
  return Shape{fp8_blocks(weight[0]), fp8_blocks(weight[1])};
}

std::string fp8_scale_name(const std::string& weight_name) { return weight_name + "_scale_inv"; }

void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scale) {
  const int64_t scale_cols = fp8_blocks(cols);
  for (int64_t br = 0; br < fp8_blocks(rows); ++br) {
    const int64_t r0 = br * kFp8BlockSize, r1 = std::min(rows, r0 + kFp8BlockSize);
    for (int64_t bc = 0; bc < scale_cols; ++bc) {
      const int64_t c0 = bc * kFp8BlockSize, c1 = std::min(cols, c0 + kFp8BlockSize);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const float s = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
      scale[br * scale_cols + bc] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = f32_to_fp8_e4m3(w[r * cols + c] / s);
    }
  }
}

void dequantize_fp8_run(const uint8_t* q, const float* scale, int64_t cols, int64_t first, int64_t count,
                        float* out) {
  const int64_t scale_cols = fp8_blocks(cols), end = first + count;
  for (int64_t e = first; e < end;) {  // one row's piece at a time
    const int64_t r = e / cols, c0 = e % cols, c1 = std::min(cols, c0 + (end - e));
    const float* row_scales = scale + (r / kFp8BlockSize) * scale_cols;
    const uint8_t* row = q + r * cols;
    for (int64_t c = c0; c < c1; ++c) *out++ = fp8_e4m3_to_f32(row[c]) * row_scales[c / kFp8BlockSize];
    e += c1 - c0;
  }
}

}  // namespace nanovllm
