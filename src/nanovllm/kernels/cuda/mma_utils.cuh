// PTX wrappers shared by the attention kernels: cp.async (plain and zero-filling), ldmatrix, mma.sync
// m16n8k16 bf16 (and f16) -> fp32, ex2.approx, bf16x2 / f16x2 packing, plus the quad reductions and lane addressing of the
// mma.sync fragment layouts. All sm_80+; the wgmma-only pieces stay in attention_prefill_wgmma.cu.
//
// Fragment layout (mma.sync m16n8k16, per warp): lane = 4 gq + tq holds, of each 8-column n-tile n of a
// 16-row accumulator, rows gq and gq + 8 ("h" = 0, 1), columns 2 tq and 2 tq + 1: element e = 2 h + c.
// The wgmma accumulator of a warp's 16 rows has the same layout, stored flat (n-tile n = registers 4n..4n+3).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace nanovllm::cuda_ops {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = smem_u32(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// 16-byte async copy; `valid == false` writes 16 zero bytes (src-size 0) and reads nothing.
__device__ __forceinline__ void cp_async16_zfill(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// Element offsets (within a row-major bf16 tile of `stride` elements per row) of this lane's ldmatrix.x4 row:
// - B: two n-tiles (rows 0-7, 8-15 of an [n][k] tile, e.g. K) x 16 k-columns: registers {0, 1} then {2, 3};
// - B trans (.trans): 16 k-rows of a [k][n] tile (e.g. V) x two 8-wide n-tiles: registers {0, 1} then {2, 3}.
__device__ __forceinline__ int ldsm_b_offset(int lane, int stride) {
  return ((lane & 7) + ((lane >> 4) << 3)) * stride + ((lane >> 3) & 1) * 8;
}
__device__ __forceinline__ int ldsm_bt_offset(int lane, int stride) {
  return ((lane & 7) + (((lane >> 3) & 1) << 3)) * stride + (lane >> 4) * 8;
}

// c += a * b  (16x16 bf16 row-major A, 16x8 bf16 col-major B, fp32 accumulators)
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b, f16 operands (the fp8 KV decode: e4m3 codes convert exactly to f16, kv_fp8.cuh).
__device__ __forceinline__ void mma16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo -> low 16 bits (the lower column)
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);  // lo -> low 16 bits
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Reductions over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Accumulator fragments stored as [NT][4] (mma.sync kernels) or flat [4 NT] (wgmma): frag(c, n, e) is
// element e of n-tile n either way; FragTiles<T>::kN is NT.
template <class T> struct FragTiles;
template <int N> struct FragTiles<float[N][4]> { static constexpr int kN = N; };
template <int N> struct FragTiles<float[N]> {
  static_assert(N % 4 == 0, "flat accumulator: 4 registers per n-tile");
  static constexpr int kN = N / 4;
};
template <int N> __device__ __forceinline__ float& frag(float (&c)[N][4], int n, int e) { return c[n][e]; }
template <int N> __device__ __forceinline__ float& frag(float (&c)[N], int n, int e) { return c[4 * n + e]; }
template <int N> __device__ __forceinline__ float frag(const float (&c)[N][4], int n, int e) { return c[n][e]; }
template <int N> __device__ __forceinline__ float frag(const float (&c)[N], int n, int e) { return c[4 * n + e]; }

}  // namespace nanovllm::cuda_ops
