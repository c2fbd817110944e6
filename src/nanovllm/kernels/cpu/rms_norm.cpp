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

namespace {

// out_residual[i] = residual[in_row] + x[in_row], out[i] = rms_norm(out_residual[i]) * weight, with
// in_row = rows ? rows[i] : i (rows validated by ops.cpp). out / out_residual may be x / residual.
void add_norm_rows(TensorView out, TensorView out_residual, TensorView x, TensorView residual, const int32_t* rows,
                   TensorView weight, float eps) {
  const int64_t S = out.dim(0), H = x.dim(1);
  parallel_for(S, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* row = scratch_f32(buf, 3 * H);  // [H] x, [H] residual, [H] weight
    float* res = row + H;
    float* w = row + 2 * H;
    load_row_f32(weight.data(), weight.dtype(), 0, H, w);
    for (int64_t i = b; i < e; ++i) {
      const int64_t in = rows != nullptr ? rows[i] : i;
      load_row_f32(x.data(), x.dtype(), in * H, H, row);
      load_row_f32(residual.data(), residual.dtype(), in * H, H, res);
      for (int64_t j = 0; j < H; ++j) res[j] += row[j];
      store_row_f32(res, H, out_residual.data(), out_residual.dtype(), i * H);
      // Normalise what was stored (matters when the residual is bf16).
      load_row_f32(out_residual.data(), out_residual.dtype(), i * H, H, row);
      rms_norm_row(row, w, H, eps);
      store_row_f32(row, H, out.data(), out.dtype(), i * H);
    }
  }, 8);
}

}  // namespace

void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps) {
  add_norm_rows(x, residual, x, residual, nullptr, weight, eps);
}

void copy_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps) {
  convert(residual, x);
  rms_norm(x, residual, weight, eps);  // normalise what was stored (matters when the residual is bf16)
}

void gather_add_rms_norm(TensorView out, TensorView out_residual, TensorView x, TensorView residual, TensorView rows,
                         TensorView weight, float eps) {
  add_norm_rows(out, out_residual, x, residual, rows.data_as<const int32_t>(), weight, eps);
}

}  // namespace nanovllm::cpu
