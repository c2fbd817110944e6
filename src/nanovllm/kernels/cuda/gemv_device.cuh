// Device helpers shared by the gemv kernels (gemv.cu: row-tile / split-K kernel; gemv_stream.cuh:
// stream-K kernel). See gemv.cu for the operand layout: W rows as the 16-row A operand of mma.sync
// m16n8k16, the tokens as the 8-wide B operand, each lane's 16-byte load = 8 consecutive k.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/common.cuh"

namespace nanovllm::cuda_ops::gemv_detail {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kU = 4;                 // 16-byte loads per lane per W row per step
constexpr int kStepVecs = 4 * kU;     // 8-element vectors of K one warp step covers (= 128 k)

__device__ __forceinline__ uint4 ld_weight(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// ld_weight(p) where `ok`, else zeros, with the guard inside the asm. ld_weight is an asm without side effects,
// which the compiler may execute where the source does not: `k < K ? ld_weight(w + k) : 0` in moe_fp8.cu's
// K loop was hoisted out of its token loop unguarded and read past the end of the weights (compute-sanitizer,
// lanes past K of an expert's last rows). Here a hoisted or speculated copy still loads only where `ok`.
__device__ __forceinline__ uint4 ld_weight_if(const uint4* p, bool ok) {
  uint4 r = make_uint4(0, 0, 0, 0);
  asm("{\n"
      "  .reg .pred ld_ok;\n"
      "  setp.ne.b32 ld_ok, %5, 0;\n"
      "  @ld_ok ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)
      : "l"(p), "r"(static_cast<int>(ok)));
  return r;
}

// Lane's x rows (token g + 8 nt of each 8-token B tile, clamped to T - 1: padding tokens reread the
// last row, their products are never stored) and zeroed accumulators.
template <int kNT>
__device__ __forceinline__ void start_tiles(const uint4* x, int x_pitch, int g, int T, const uint4* (&xr)[kNT],
                                            float (&acc)[kNT][4]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    xr[nt] = x + int64_t{min(g + 8 * nt, T - 1)} * x_pitch;
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  }
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <bool kOutF32>
__device__ __forceinline__ void store_out(void* out, int64_t i, float v) {
  if constexpr (kOutF32) static_cast<float*>(out)[i] = v;
  else static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
}

// out[tok, row] = sum (+ bias[row] when there is a bias): the final store of every gemv kind.
template <bool kOutF32>
__device__ __forceinline__ void store_result(void* out, int tok, int N, int row, float sum, const void* bias,
                                             int bias_dt) {
  if (bias != nullptr) sum += load_f32(bias, bias_dt, row);
  store_out<kOutF32>(out, int64_t{tok} * N + row, sum);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// silu(gate) * up of 8 bf16 pairs, rounded to bf16 (the values silu_mul stores).
__device__ __forceinline__ uint4 silu_mul8(const uint4& gate, const uint4& up) {
  float g[8], u[8];
  bf16x8_to_f32(gate, g);
  bf16x8_to_f32(up, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) g[i] = silu(g[i]) * u[i];
  return f32_to_bf16x8(g);
}

// Where a kernel's x vectors come from: global memory (read through L1), silu(gate) * up computed from
// global gate_up on the fly, or shared memory (a copy the kernel staged there).
enum XSource : int { kXGlobal = 0, kXSilu = 1, kXShared = 2 };

// One 16-byte x vector (8 consecutive k of one token). kXSilu: x = silu(gate) * up rounded to bf16 (the
// values silu_mul would store), gate at xr[v], up at xr[v + Kv].
template <int kX>
__device__ __forceinline__ uint4 load_x(const uint4* xr, int v, int Kv) {
  if constexpr (kX == kXShared) {
    uint4 r;
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(xr + v));
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(a));
    return r;
  } else if constexpr (kX == kXSilu) {
    return silu_mul8(__ldg(xr + v), __ldg(xr + Kv + v));
  } else {
    return __ldg(xr + v);
  }
}

// One warp step's W: rows w_lo / w_hi (rows g and g + 8 of the tile), vectors vb + q + 4 u (zero at or
// past v_end).
__device__ __forceinline__ void load_w_step(const uint4* w_lo, const uint4* w_hi, int vb, int v_end, int q,
                                            uint4 (&lo)[kU], uint4 (&hi)[kU]) {
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int v = vb + q + 4 * u;
    if (v < v_end) {
      lo[u] = ld_weight(w_lo + v);
      hi[u] = ld_weight(w_hi + v);
    } else {
      lo[u] = hi[u] = make_uint4(0, 0, 0, 0);
    }
  }
}

// One warp step's products: x of the step's vectors (token rows xr, zero at or past v_end) times the W
// held in (lo, hi), accumulated into acc.
template <int kNT, int kX>
__device__ __forceinline__ void mma_step(float (&acc)[kNT][4], const uint4 (&lo)[kU], const uint4 (&hi)[kU],
                                         const uint4* const (&xr)[kNT], int vb, int v_end, int q, int Kv) {
  uint4 b[kNT][kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int v = vb + q + 4 * u;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) b[nt][u] = v < v_end ? load_x<kX>(xr[nt], v, Kv) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kU; ++u) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      mma_bf16(acc[nt], lo[u].x, hi[u].x, lo[u].y, hi[u].y, b[nt][u].x, b[nt][u].y);
      mma_bf16(acc[nt], lo[u].z, hi[u].z, lo[u].w, hi[u].w, b[nt][u].z, b[nt][u].w);
    }
  }
}

}  // namespace nanovllm::cuda_ops::gemv_detail
