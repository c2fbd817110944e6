// Stream-K gemv: out[T, N] = x[T, K] @ W[N, K]^T (+ bias), the same warp step as gemv.cu's kernel (a
// 16-row tile of W x 128 k, mma.sync with the tokens as B), but the work is cut for one even wave.
//
// Why: gemv.cu gives each CTA whole 16-row tiles (optionally a K split); on shapes like Qwen3-8B's qkv
// (384 row tiles, 264 resident CTAs) the CTA count is 1.45 waves and the second wave runs a third full,
// so the stream reaches ~2.8 of ~4.2 TB/s. Here the row tiles' k-steps are laid end to end
// (total = row_tiles x steps_per_tile) and warp w takes steps [w spw, (w + 1) spw): every warp streams
// the same number of bytes, whatever the shape.
// A warp that covers a whole tile writes it directly. A tile split across warps w_first..w_last gets
// each warp's fp32 fragment in workspace slot (w, 0) when it is that warp's first tile and (w, 1)
// otherwise (a warp's range touches at most two partial tiles: its first and its last); the last warp
// to arrive (per-tile counter, reset by it) sums the slots in warp order: deterministic.
// PDL (pdl.cuh): each warp loads its first W step before pdl_wait(); x is read after it.
#pragma once

#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops::gemv_detail {

// Floats of one warp's fragment slot: kNT B tiles x 32 lanes x 4 accumulators.
template <int kNT>
constexpr int kSlotFloats = kNT * 32 * 4;

// kNT: 8-token B tiles (1: T <= 8, 2: T <= 16). Kv = K / 8; x_pitch = vectors per x row (Kv, or 2 Kv
// for kSilu). spt = ceil(Kv / kStepVecs) steps per row tile; spw = steps per warp; total = row tiles x spt.
// ws: [2 x warps, kSlotFloats] fp32; counters: [row tiles], zero between launches.
template <int kNT, bool kOutF32, bool kSilu>
__global__ void __launch_bounds__(kThreads, 2)
gemv_stream_kernel(void* __restrict__ out, const uint4* __restrict__ x, int x_pitch, const uint4* __restrict__ w,
                   const void* __restrict__ bias, int bias_dt, int T, int N, int Kv, int spt, int spw, int total,
                   float* __restrict__ ws, unsigned* __restrict__ counters) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  const int gw = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x >> 5);
  const int s_begin = gw * spw;
  const int s_end = min(total, s_begin + spw);
  if (s_begin >= total) return;  // (PDL: an exiting CTA counts as triggered)

  // W of step s: rows tile * 16 + g (+ 8) (clamped: rows >= N reuse row N - 1, their results are
  // dropped), vectors (s % spt) * kStepVecs + q + 4 u; zero past Kv.
  auto load_w = [&](int s, uint4 (&lo)[kU], uint4 (&hi)[kU]) {
    const int tile = s / spt, vb = (s - tile * spt) * kStepVecs;
    const uint4* w_lo = w + int64_t{min(tile * 16 + g, N - 1)} * Kv;
    const uint4* w_hi = w + int64_t{min(tile * 16 + g + 8, N - 1)} * Kv;
    load_w_step(w_lo, w_hi, vb, Kv, q, lo, hi);
  };
  uint4 a0_lo[kU], a0_hi[kU], a1_lo[kU], a1_hi[kU];
  load_w(s_begin, a0_lo, a0_hi);

  pdl_wait();
  pdl_trigger();

  const uint4* xr[kNT];
  float acc[kNT][4];
  start_tiles<kNT>(x, x_pitch, g, T, xr, acc);

  auto step = [&](int s, const uint4 (&lo)[kU], const uint4 (&hi)[kU]) {
    const int vb = (s % spt) * kStepVecs;
    mma_step<kNT, kSilu ? kXSilu : kXGlobal>(acc, lo, hi, xr, vb, Kv, q, Kv);
  };

  // C fragment -> out: acc[nt][0..1] = row g, tokens 8 nt + 2q + {0, 1}; acc[nt][2..3] = row g + 8.
  auto write_tile = [&](int tile, const float (&c)[kNT][4]) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = tile * 16 + g + (e >= 2 ? 8 : 0);
        const int tok = 8 * nt + 2 * q + (e & 1);
        if (row >= N || tok >= T) continue;
        store_result<kOutF32>(out, tok, N, row, c[nt][e], bias, bias_dt);
      }
    }
  };
  const int first_tile = s_begin / spt;
  // The tile ending at step s (inclusive) is done for this warp: write it, or publish a partial.
  auto finish_tile = [&](int s) {
    const int tile = s / spt;
    const int t_begin = tile * spt, t_end = t_begin + spt;
    if (t_begin >= s_begin && t_end <= s_end) {
      write_tile(tile, acc);
    } else {
      float* slot = ws + (int64_t{gw} * 2 + (tile == first_tile ? 0 : 1)) * kSlotFloats<kNT>;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        *reinterpret_cast<float4*>(slot + (nt * 32 + lane) * 4) = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
      __threadfence();  // the partial is visible device-wide before the arrival is counted
      __syncwarp();
      const int w_first = t_begin / spw, w_last = (t_end - 1) / spw;
      unsigned last = 0;
      if (lane == 0) last = atomicAdd(&counters[tile], 1u) == static_cast<unsigned>(w_last - w_first);
      last = __shfl_sync(0xffffffffu, last, 0);
      if (last) {
        __threadfence();
        float sum[kNT][4];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) sum[nt][0] = sum[nt][1] = sum[nt][2] = sum[nt][3] = 0.0f;
        for (int ow = w_first; ow <= w_last; ++ow) {
          const int which = tile == (ow * spw) / spt ? 0 : 1;
          const float* os = ws + (int64_t{ow} * 2 + which) * kSlotFloats<kNT>;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(os + (nt * 32 + lane) * 4));
            sum[nt][0] += v.x, sum[nt][1] += v.y, sum[nt][2] += v.z, sum[nt][3] += v.w;
          }
        }
        write_tile(tile, sum);
        if (lane == 0) counters[tile] = 0;  // ready for the next launch (stream-ordered)
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  };
  auto after_step = [&](int s) {
    if (s + 1 == s_end || (s + 1) % spt == 0) finish_tile(s);
  };

  // Two W buffers: the next step's loads are in flight while this step's products run.
  for (int s = s_begin; s < s_end; s += 2) {
    if (s + 1 < s_end) load_w(s + 1, a1_lo, a1_hi);
    step(s, a0_lo, a0_hi);
    after_step(s);
    if (s + 1 >= s_end) break;
    if (s + 2 < s_end) load_w(s + 2, a0_lo, a0_hi);
    step(s + 1, a1_lo, a1_hi);
    after_step(s + 1);
  }
}

}  // namespace nanovllm::cuda_ops::gemv_detail
