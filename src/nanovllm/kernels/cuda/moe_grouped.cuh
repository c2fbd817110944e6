// What the experts' grouped GEMM kernels share (moe_experts.cu: the streaming and mma.sync kernels;
// moe_gemm_wgmma.cu: the sm_90a tile GEMM): their arguments, the A row of an expert row, and a CTA's
// (expert, row tile) among the active experts' tiles.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/fp8_gemv_device.cuh"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::cuda_ops::moe_grouped {

// One grouped GEMM: out[r, :] = f(W[e] @ a(r)) for the rows r of every expert e.
struct GroupedArgs {
  const __nv_bfloat16* a;    // stage 1: x [T, K] (row of r = sorted[r] / k); stage 2: act [P, K] (row r)
  const __nv_bfloat16* w;    // [E, Nw, K]: Nw = 2 N (stage 1: gate rows, then up rows) or N (bf16 experts)
  const uint8_t* w8;         // fp8 experts: the codes [E, Nw, K] (w null)
  const float* w_scale;      // fp8 experts: [E, Nw / 128, K / 128]
  __nv_bfloat16* out;        // [P, N]
  const int32_t* offsets;    // [E + 1]
  const int32_t* sorted;     // [P]
  const int32_t* active;     // [E]
  int K, N, P, E, k;
};

// The A row (activation or token) of expert row r.
template <bool kGateUp>
__device__ __forceinline__ const __nv_bfloat16* a_row(const GroupedArgs& g, int r) {
  const int row = kGateUp ? g.sorted[r] / g.k : r;
  return g.a + int64_t{row} * g.K;
}

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// The weight row of the tiled kernels' B tile row `row` for output columns from n0 (0 when past the end, to be
// zero-filled), and whether it exists. Stage 1's B rows alternate 16 gate rows and the matching 16 up rows, so a
// thread's accumulators hold both halves of its columns.
template <bool kGateUp>
__device__ __forceinline__ int b_weight_row(const GroupedArgs& g, int n0, int row, bool& ok) {
  int wrow;
  if constexpr (kGateUp) {
    const int j = n0 + (row / 32) * 16 + row % 16;
    ok = j < g.N;
    wrow = (row / 16) % 2 == 0 ? j : g.N + j;
  } else {
    wrow = n0 + row;
    ok = wrow < g.N;
  }
  return ok ? wrow : 0;
}

// out[col], out[col + 1] = y0, y1 rounded to bf16 (those below n); one 4-byte store where both exist and align.
__device__ __forceinline__ void store_pair(__nv_bfloat16* out, int col, int n, float y0, float y1) {
  if (col + 1 < n && (n & 1) == 0) {
    *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(y0, y1);
  } else {
    if (col < n) out[col] = __float2bfloat16_rn(y0);
    if (col + 1 < n) out[col + 1] = __float2bfloat16_rn(y1);
  }
}

// fp8 experts: 16 e4m3 codes (one 16-byte chunk of a weight row) as bf16(code x scale), the f32 product rounded once
// to f32 then to bf16 as the loader's dequantization (fp8_gemv_device.cuh decodes codes x 2^-120 exactly; x 2^120 is
// exact too): lo = the first 8, hi = the last 8. What the tiled kernels write into their bf16 B tiles, so their
// GEMMs are the bf16 GEMMs on the dequantized experts, bit for bit.
__device__ __forceinline__ void dequantize16(const uint4& codes, float scale, uint4& lo, uint4& hi) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  float v[2][8];
#pragma unroll
  for (int i = 0; i < 4; ++i) fp8_gemv_detail::e4m3x4_times_2pow_minus120(words[i], &v[i / 2][4 * (i % 2)]);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) v[h][i] = __fmul_rn(__fmul_rn(v[h][i], fp8_gemv_detail::kTwoPow120), scale);
  lo = f32_to_bf16x8(v[0]);
  hi = f32_to_bf16x8(v[1]);
}

// Which expert and row tile (of `rows_per_tile` rows) a CTA computes: the blockIdx.x-th tile of the active
// experts' tiles, by one warp (a scan over the active list's tile counts). expert = -1 when blockIdx.x is past
// the last tile (the grid bounds the count from above). Every lane of the warp calls it; the results are written to
// expert / first_row (shared memory), read after a barrier.
__device__ inline void find_row_tile(const GroupedArgs& g, int rows_per_tile, int lane, int& expert, int& first_row) {
  if (lane == 0) expert = -1;
  __syncwarp();
  int base = 0;
  const int b = static_cast<int>(blockIdx.x);
  for (int i0 = 0; i0 < g.E; i0 += 32) {
    const int e = i0 + lane < g.E ? g.active[i0 + lane] : -1;
    const int tiles = e >= 0 ? (g.offsets[e + 1] - g.offsets[e] + rows_per_tile - 1) / rows_per_tile : 0;
    int incl = tiles;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += v;
    }
    if (tiles > 0 && b >= base + incl - tiles && b < base + incl) {
      expert = e;
      first_row = (b - (base + incl - tiles)) * rows_per_tile;
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
}

// The grouped GEMM of a long step on the sm_90a tile kernel (moe_gemm_wgmma.cu): false, launching nothing, where the
// device or the loaded binary is not sm_90a (the caller runs the mma.sync kernel). bf16 experts (a.w) or fp8 ones
// (a.w8 and a.w_scale; K a multiple of 128).
bool moe_gemm_wgmma(const GroupedArgs& a, bool gate_up, ops::Stream s);

}  // namespace nanovllm::cuda_ops::moe_grouped
