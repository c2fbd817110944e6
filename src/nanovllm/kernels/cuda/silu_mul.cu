// out = silu(gate) * up, gate = gate_up[:, :I], up = gate_up[:, I:], silu(g) = g / (1 + exp(-g)) in fp32.
// bf16 with I % 8 == 0: 16-byte loads of gate and up, one 16-byte store; a 1-D grid of (row, chunk block).
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__global__ void silu_mul_vec_kernel(uint4* __restrict__ out, const uint4* __restrict__ gate_up,
                                    int64_t chunks, unsigned blocks_per_row) {  // chunks = I / 8
  const int64_t t = blockIdx.x / blocks_per_row;
  const int64_t c = (blockIdx.x % blocks_per_row) * int64_t{blockDim.x} + threadIdx.x;
  pdl_trigger();  // early trigger (pdl.cuh): the down projection after it prefetches weights only
  pdl_wait();
  if (c >= chunks) return;
  float g[8], u[8], o[8];
  bf16x8_to_f32(gate_up[t * 2 * chunks + c], g);
  bf16x8_to_f32(gate_up[t * 2 * chunks + chunks + c], u);
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = silu(g[i]) * u[i];
  out[t * chunks + c] = f32_to_bf16x8(o);
}

__global__ void silu_mul_generic_kernel(void* out, int out_dt, const void* gate_up, int gu_dt, int64_t I,
                                        unsigned blocks_per_row) {
  const int64_t t = blockIdx.x / blocks_per_row;
  const int64_t i = (blockIdx.x % blocks_per_row) * int64_t{blockDim.x} + threadIdx.x;
  pdl_wait();
  pdl_trigger();
  if (i >= I) return;
  const float g = load_f32(gate_up, gu_dt, t * 2 * I + i);
  const float u = load_f32(gate_up, gu_dt, t * 2 * I + I + i);
  store_f32(out, out_dt, t * I + i, silu(g) * u);
}

}  // namespace

void silu_mul(TensorView out, TensorView gate_up, ops::Stream s) {
  const int64_t T = out.dim(0), I = out.dim(1);
  if (T == 0 || I == 0) return;
  const ops::Stream st = s;
  const bool vec = out.dtype() == DType::kBF16 && gate_up.dtype() == DType::kBF16 && I % 8 == 0 &&
                   aligned16(out.data()) && aligned16(gate_up.data());
  if (vec) {
    const int64_t chunks = I / 8;
    const unsigned bpr = ceil_div_u(chunks, 128);
    launch_pdl(silu_mul_vec_kernel, dim3(bpr * static_cast<unsigned>(T)), dim3(128), 0, st, out.data_as<uint4>(),
               gate_up.data_as<const uint4>(), chunks, bpr);
  } else {
    const unsigned bpr = ceil_div_u(I, 256);
    launch_pdl(silu_mul_generic_kernel, dim3(bpr * static_cast<unsigned>(T)), dim3(256), 0, st, out.data(), dt(out),
               gate_up.data(), dt(gate_up), I, bpr);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
