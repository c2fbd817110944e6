// The fp8 weights' warp step on the bf16 tensor cores, shared by the MoE experts' GEMV (moe_experts.cu, kFp8) and
// the fp8 linear's decode-batch GEMV (fp8_gemv_mma.cu). gemv_device.cuh's operand layout (W rows as the 16-row A
// operand of mma.sync m16n8k16, tokens as the 8-wide B operand), with each lane's 16-byte load holding 16 codes: two
// byte permutes and masks make them bf16 (their values times 2^-120, exact; e4m3 subnormals as bf16 subnormals:
// fp8_gemv_device.cuh) and they enter the mma as two of the bf16 GEMV's 8-k vectors, so A and B keep that k order.
// x is multiplied by 2^64 first (exact: a power of two), so the f32 sums sit near the products times 2^-56, far
// from f32's subnormals whatever the sizes of x; each 128-column block's sums join the accumulators times the
// block's scale x 2^56. A warp step is 256 k: two scale blocks. Block-scaled fp8 as docs/fp8.md (K a multiple of
// 128; a 16-row tile inside one 128-row block).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/fp8_gemv_device.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"

namespace nanovllm::cuda_ops::fp8_mma_detail {

using gemv_detail::kU;
constexpr float kProductScale = 0x1p56f;  // 2^120 (the codes) x 2^-64 (x)
constexpr int kStepK = 256;                // k per warp step: 4 lanes x kU loads x 16 codes

__device__ __forceinline__ uint4 bf16x8_times_2pow64(uint4 v) {
  const __nv_bfloat162 f = __float2bfloat162_rn(0x1p64f);
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __hmul2(h[i], f);
  return v;
}

// Step s's codes: lane q holds code vectors (16 codes) 16 s + q + 4 u of rows g (lo) and g + 8 (hi), u < kU:
// u = 0, 1 in the step's first scale block, 2, 3 in its second. c_end = K / 16; none loaded at or past it.
__device__ __forceinline__ void load_codes_step(const uint4* w_lo, const uint4* w_hi, int s, int c_end, int q,
                                                uint4 (&lo)[kU], uint4 (&hi)[kU]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = 16 * s + q + 4 * u;
    lo[u] = gemv_detail::ld_weight_if(w_lo + c, c < c_end);  // the guard inside the asm: never past a row
    hi[u] = gemv_detail::ld_weight_if(w_hi + c, c < c_end);
  }
}

// Step s's products into acc: x rows xr (token g + 8 nt of each B tile), `scale` the tile's row of block scales
// (one per 128 columns, k_blocks of them).
template <int kNT>
__device__ __forceinline__ void mma_step(float (&acc)[kNT][4], const uint4 (&lo)[kU], const uint4 (&hi)[kU],
                                         const uint4* const (&xr)[kNT], int s, int k_blocks, int q,
                                         const float* scale) {
  using fp8_gemv_detail::e4m3x4_as_bf16x4_times_2pow_minus120;
#pragma unroll
  for (int hb = 0; hb < 2; ++hb) {
    const int kb = 2 * s + hb;
    if (kb >= k_blocks) break;  // K = 128 (mod 256): the last step has one block (warp-uniform)
    float part[kNT][4] = {};
#pragma unroll
    for (int uu = 0; uu < 2; ++uu) {
      const int u = 2 * hb + uu, c = 16 * s + q + 4 * u;
      const uint32_t lw[4] = {lo[u].x, lo[u].y, lo[u].z, lo[u].w}, hw[4] = {hi[u].x, hi[u].y, hi[u].z, hi[u].w};
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // bf16 vector 2 c + h: codes 8 h .. 8 h + 7
        uint4 b[kNT];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) b[nt] = bf16x8_times_2pow64(__ldg(xr[nt] + 2 * c + h));
#pragma unroll
        for (int j = 2 * h; j < 2 * h + 2; ++j) {  // codes 4 j .. 4 j + 3: the vector's k pairs 0, 1 or 2, 3
          const uint2 a_lo = e4m3x4_as_bf16x4_times_2pow_minus120(lw[j]);
          const uint2 a_hi = e4m3x4_as_bf16x4_times_2pow_minus120(hw[j]);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
            gemv_detail::mma_bf16(part[nt], a_lo.x, a_hi.x, a_lo.y, a_hi.y, j % 2 == 0 ? b[nt].x : b[nt].z,
                                  j % 2 == 0 ? b[nt].y : b[nt].w);
        }
      }
    }
    const float sc = __ldg(scale + kb) * kProductScale;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = fmaf(part[nt][i], sc, acc[nt][i]);
  }
}

}  // namespace nanovllm::cuda_ops::fp8_mma_detail
