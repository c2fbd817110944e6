// out[t] = sum over j of topk_weights[t, j] * rows[pair_rows[t k + j]] (kernels/moe_ops.h, moe_combine):
// one CTA per token, fp32 accumulation in slot order, 16-byte bf16 accesses (any float dtype otherwise).
// PDL-launched: waits for the expert rows first, then lets its successor launch.
#include <cstdint>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kThreads = 128;

struct CombineArgs {
  void* out;              // [T, H]
  const void* rows;       // [P, H]
  const float* weights;   // [T, k]
  const int32_t* pair_rows;  // [P]
  int H, k, out_dt, rows_dt;
};

// bf16 rows and out, H % 8 == 0: 8 columns per thread and step.
__global__ void __launch_bounds__(kThreads) combine_bf16_kernel(CombineArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int hv = a.H / 8;
  for (int v = static_cast<int>(threadIdx.x); v < hv; v += kThreads) {
    float acc[8] = {};
    for (int j = 0; j < a.k; ++j) {
      const int64_t r = a.pair_rows[t * a.k + j];
      const float w = a.weights[t * a.k + j];
      float x[8];
      bf16x8_to_f32(reinterpret_cast<const uint4*>(a.rows)[r * hv + v], x);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += w * x[i];
    }
    reinterpret_cast<uint4*>(a.out)[t * hv + v] = f32_to_bf16x8(acc);
  }
}

__global__ void __launch_bounds__(kThreads) combine_kernel(CombineArgs a) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  for (int h = static_cast<int>(threadIdx.x); h < a.H; h += kThreads) {
    float acc = 0.f;
    for (int j = 0; j < a.k; ++j)
      acc += a.weights[t * a.k + j] * load_f32(a.rows, a.rows_dt, int64_t{a.pair_rows[t * a.k + j]} * a.H + h);
    store_f32(a.out, a.out_dt, t * a.H + h, acc);
  }
}

}  // namespace

void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows, ops::Stream s) {
  const int64_t T = out.dim(0);
  if (T == 0) return;
  const CombineArgs a{out.data(), rows.data(), topk_weights.data_as<const float>(), pair_rows.data_as<const int32_t>(),
                      static_cast<int>(out.dim(1)), static_cast<int>(topk_weights.dim(1)), dt(out), dt(rows)};
  const bool vec = out.dtype() == DType::kBF16 && rows.dtype() == DType::kBF16 && a.H % 8 == 0 &&
                   aligned16(out.data()) && aligned16(rows.data());
  launch_pdl(vec ? combine_bf16_kernel : combine_kernel, dim3(static_cast<unsigned>(T)), dim3(kThreads), 0, s, a);
}

}  // namespace nanovllm::cuda_ops
