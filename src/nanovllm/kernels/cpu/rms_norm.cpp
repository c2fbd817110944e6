// RMSNorm as HF's Qwen3RMSNorm computes it in fp32: x * rsqrt(mean(x^2) + eps), then * weight.
// The mean of squares is accumulated in fp64 (at least as accurate as torch's cascade sum).
#include <cmath>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/rms_norm_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void rms_norm(TensorView out, TensorView x, TensorView weight, float eps) {
  const int64_t T = x.dim(0), H = x.dim(1);
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* row = scratch_f32(buf, 2 * H);  // [H] row, [H] weight
    float* w = row + H;
    load_row_f32(weight.data(), weight.dtype(), 0, H, w);
    for (int64_t t = b; t < e; ++t) {
      load_row_f32(x.data(), x.dtype(), t * H, H, row);
      rms_norm_row(row, w, H, eps);
      store_row_f32(row, H, out.data(), out.dtype(), t * H);
    }
  }, 8);
}

void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps) {
  const int64_t T = x.dim(0), H = x.dim(1);
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* row = scratch_f32(buf, 3 * H);  // [H] x, [H] residual, [H] weight
    float* res = row + H;
    float* w = row + 2 * H;
    load_row_f32(weight.data(), weight.dtype(), 0, H, w);
    for (int64_t t = b; t < e; ++t) {
      load_row_f32(x.data(), x.dtype(), t * H, H, row);
      load_row_f32(residual.data(), residual.dtype(), t * H, H, res);
      for (int64_t i = 0; i < H; ++i) res[i] += row[i];
      store_row_f32(res, H, residual.data(), residual.dtype(), t * H);
      // Normalise what was stored (matters when the residual is bf16).
      load_row_f32(residual.data(), residual.dtype(), t * H, H, row);
      rms_norm_row(row, w, H, eps);
      store_row_f32(row, H, x.data(), x.dtype(), t * H);
    }
  }, 8);
}

}  // namespace nanovllm::cpu
