// Bulk-copy gemv (sm_90): out[T, N] = x[T, K] @ W[N, K]^T (+ bias), the same warp products as gemv.cu's
// kernels (gemv_device.cuh), but W reaches shared memory through the copy engine (cp.async.bulk) into
// a ring of kBulkStages stages instead of through registers.
//
// Why: the register-fed kernels keep 2 x 4 KB of W in flight per warp, 64 KB per 8-warp CTA, in 256-byte
// row pieces. Here one producer lane per W row keeps 3 x 32 KB per CTA in flight in shared memory, in
// 2 KB row pieces, with 160 threads and ~105 KB, so two CTAs fit per SM. Before its pdl_wait() the
// producer already requests the CTA's first 96 KB of weights: they stream during the predecessor.
// Measured on the H200 (L2-cold, alone): the Qwen3-0.6B projections 3-30% faster than the best
// register-fed shape, the 8B gate_up 48.1 vs 59.4 us (cuBLASLt 49.6).
//
// Work: the weights are cut into units of one 16-row tile x 1024 k (16 row segments of <= 2 KB), laid
// end to end tile by tile (cpt = ceil(K / 1024) units per tile); CTA c takes units [c upc, (c + 1) upc).
// Stage layout [16 rows][kBulkRowPitch bytes]: the 64-byte pad puts rows g and g + 1 on different
// banks for the consumers' 16-byte loads. Consumer warp cw takes k vectors [32 cw, 32 cw + 32) of each
// unit (two gemv warp steps). At the end of a tile the 4 warps' fragments are summed in shared memory
// in warp order; a tile that lies wholly in the CTA's range is written out, otherwise each CTA writes
// an fp32 partial to its workspace slot (0: its first tile, 1: its last) and the last CTA to arrive
// (per-tile counter, reset by it) sums the partials in CTA order: deterministic.
#pragma once

#include "nanovllm/kernels/cuda/bulk_copy.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops::gemv_detail {

constexpr int kBulkConsumers = 4;                           // consumer warps
constexpr int kBulkThreads = (kBulkConsumers + 1) * 32;     // + 1 producer warp
// A unit row is 2 KB (1024 k) in 3 stages: on the H200 this streamed the 8B gate_up at 4.19 TB/s and
// qkv at 3.24, against 3.85 / 3.00 with 1 KB rows in 6 stages and 3.79-3.89 / 3.37 with 4 KB x 2 or
// 2 KB x 4 (CudaGemvBench.DISABLED_Shapes): longer contiguous row segments help the DRAM side.
constexpr int kBulkWarpSteps = 2;  // gemv warp steps (128 k each) per consumer warp per unit
constexpr int kBulkStages = 3;
constexpr int kBulkUnitVecs = kBulkConsumers * kBulkWarpSteps * kStepVecs;  // 16-byte vectors per row per unit
constexpr int kBulkRowPitch = kBulkUnitVecs * 16 + 64;      // bytes per stage row
constexpr int kBulkStageBytes = 16 * kBulkRowPitch;
// kSilu: x = silu(gate) * up of every token is computed once into shared memory after the ring
// ([T][K] bf16, at most kBulkStageMaxBytes; larger T x K take the other gemv kinds) rather than per W
// step from global gate_up: that made the fused down projection slower than silu_mul + gemv.
constexpr int kBulkStageMaxBytes = 16 * 1024;
// Floats of one tile's sums: [16 rows, kNT x 8 tokens] (also one workspace slot).
template <int kNT>
constexpr int kBulkTileFloats = 16 * kNT * 8;
template <int kNT>
constexpr size_t kBulkSmemBytes = size_t{kBulkStages} * kBulkStageBytes +
                                  size_t{kBulkConsumers} * kBulkTileFloats<kNT> * 4 +  // red
                                  2 * kBulkStages * sizeof(uint64_t) + 16;           // barriers, is_last
static_assert(kBulkSmemBytes<1> % 16 == 0 && kBulkSmemBytes<2> % 16 == 0, "the kSilu stage is 16-byte aligned");

// bar.sync of the kConsumers consumer warps alone (barrier 1; the producer warp has returned).
template <int kConsumers = kBulkConsumers>
__device__ __forceinline__ void bulk_consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers * 32) : "memory");
}

// Producer warp of a bulk ring (shared with fp8_gemv_bulk.cu): lane r < 16 copies row r of each of the CTA's
// units [u_begin, u_begin + n) into stage i % kStages, a row piece of up to kUnitBytes bytes (fewer in a
// tile's last unit) at stage offset r * kRowPitch. W [N, row_bytes] (rows past N reread row N - 1); cpt =
// units per 16-row tile. The first kStages units are requested before pdl_wait (weights only, PDL
// prologue), the others once the consumers released their stage.
template <int kStages, int kUnitBytes, int kRowPitch>
__device__ __forceinline__ void bulk_produce(unsigned char* stages, uint64_t* full, uint64_t* empty,
                                             const unsigned char* w, int64_t row_bytes, int N, int cpt,
                                             int u_begin, int n, int lane) {
  constexpr int kStageBytes = 16 * kRowPitch;
  auto issue = [&](int i) {
    const int u = u_begin + i, stage = i % kStages;
    const int tile = u / cpt;
    const int64_t b0 = int64_t{u - tile * cpt} * kUnitBytes;
    const unsigned bytes = static_cast<unsigned>(min(int64_t{kUnitBytes}, row_bytes - b0));
    if (lane == 0) mbar_arrive_expect_tx(&full[stage], 16u * bytes);
    __syncwarp();
    if (lane < 16)
      bulk_copy_g2s(stages + stage * kStageBytes + lane * kRowPitch,
                    w + int64_t{min(tile * 16 + lane, N - 1)} * row_bytes + b0, bytes, &full[stage]);
  };
  const int prologue = min(n, kStages);
  for (int i = 0; i < prologue; ++i) issue(i);  // weights only: before the wait (PDL)
  pdl_wait();
  pdl_trigger();
  for (int i = prologue; i < n; ++i) {
    mbar_wait(&empty[i % kStages], static_cast<unsigned>(i / kStages - 1) & 1u);  // previous use read
    fence_proxy_async_smem();  // the consumers' (generic) reads before the copy engine's writes
    issue(i);
  }
}

// The consumers' end of a 16-row tile (shared with fp8_gemv_bulk.cu): red [kConsumers][16][kTok] holds each
// consumer warp's sums of the tile's rows. Sums them in warp order; a tile that lies wholly in the CTA's units
// [u_begin, u_begin + n) is written out, otherwise the CTA writes an fp32 partial to its workspace slot
// (ws [2 x CTAs][16 kTok]; 0: its first tile, 1: its last) and the last CTA to arrive (counters [row tiles],
// zero between launches; reset by that CTA) sums the partials in CTA order: deterministic. upc = units per
// CTA, cpt = units per tile. Called by all consumer threads.
template <int kTok, bool kOutF32, int kConsumers = kBulkConsumers>
__device__ __forceinline__ void bulk_finish_tile(const float* red, int tile, int u_begin, int n, int upc, int cpt,
                                                 int T, int N, void* out, const void* bias, int bias_dt, float* ws,
                                                 unsigned* counters, unsigned* is_last) {
  constexpr int kTileFloats = 16 * kTok;
  const int t_begin = tile * cpt;
  const bool whole = t_begin >= u_begin && t_begin + cpt <= u_begin + n;
  float* slot = ws + (int64_t{blockIdx.x} * 2 + (tile == u_begin / cpt ? 0 : 1)) * kTileFloats;
  for (int it = threadIdx.x; it < 16 * T; it += kConsumers * 32) {
    const int tok = it >> 4, r = it & 15, row = tile * 16 + r;
    float s = 0.0f;
#pragma unroll
    for (int cw = 0; cw < kConsumers; ++cw) s += red[(cw * 16 + r) * kTok + tok];
    if (!whole) {
      slot[r * kTok + tok] = s;
    } else if (row < N) {
      store_result<kOutF32>(out, tok, N, row, s, bias, bias_dt);
    }
  }
  if (whole) return;
  __threadfence();  // the partial is visible device-wide before the arrival is counted
  bulk_consumer_sync<kConsumers>();
  const int c_first = t_begin / upc, c_last = (t_begin + cpt - 1) / upc;
  if (threadIdx.x == 0) *is_last = atomicAdd(&counters[tile], 1u) == static_cast<unsigned>(c_last - c_first);
  bulk_consumer_sync<kConsumers>();
  if (!*is_last) return;
  __threadfence();
  for (int it = threadIdx.x; it < 16 * T; it += kConsumers * 32) {
    const int tok = it >> 4, r = it & 15, row = tile * 16 + r;
    float s = 0.0f;
    for (int c = c_first; c <= c_last; ++c) {
      const int which = tile == (c * upc) / cpt ? 0 : 1;
      s += __ldcg(ws + (int64_t{c} * 2 + which) * kTileFloats + r * kTok + tok);
    }
    if (row < N) store_result<kOutF32>(out, tok, N, row, s, bias, bias_dt);
  }
  if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next launch (stream-ordered)
}

// Kv = K / 8; x_pitch = vectors per x row (Kv, or 2 Kv for kSilu); cpt = units per tile; upc = units per
// CTA; units = row tiles x cpt. ws: [2 x CTAs, kBulkTileFloats] fp32; counters: [row tiles], zero
// between launches.
template <int kNT, bool kOutF32, bool kSilu>
__global__ void __launch_bounds__(kBulkThreads, 2)
gemv_bulk_kernel(void* __restrict__ out, const uint4* __restrict__ x, int x_pitch, const uint4* __restrict__ w,
                 const void* __restrict__ bias, int bias_dt, int T, int N, int Kv, int cpt, int upc, int units,
                 float* __restrict__ ws, unsigned* __restrict__ counters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kTok = kNT * 8;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* stages = smem;                                                    // [stages][16][pitch]
  float* red = reinterpret_cast<float*>(smem + kBulkStages * kBulkStageBytes);     // [consumers][16][kTok]
  uint64_t* full = reinterpret_cast<uint64_t*>(red + kBulkConsumers * kBulkTileFloats<kNT>);  // [stages]
  uint64_t* empty = full + kBulkStages;                                            // [stages]
  unsigned* is_last = reinterpret_cast<unsigned*>(empty + kBulkStages);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int u_begin = static_cast<int>(blockIdx.x) * upc;
  const int n = min(units, u_begin + upc) - u_begin;  // > 0: the grid has ceil(units / upc) CTAs
  if (threadIdx.x == 0) {
    for (int s = 0; s < kBulkStages; ++s) {
      mbar_init(&full[s], 1);                // the producer's arrive (+ the bytes)
      mbar_init(&empty[s], kBulkConsumers * 32);  // every consumer thread (an arrive releases only its own reads)
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp == kBulkConsumers) {
    // ---- Producer warp: lane r < 16 copies row r of each unit. ----
    bulk_produce<kBulkStages, kBulkUnitVecs * 16, kBulkRowPitch>(stages, full, empty,
                                                                  reinterpret_cast<const unsigned char*>(w),
                                                                  int64_t{Kv} * 16, N, cpt, u_begin, n, lane);
    return;
  }

  // ---- Consumer warps. ----
  pdl_wait();
  pdl_trigger();
  const uint4* xin = x;
  int xin_pitch = x_pitch;
  if constexpr (kSilu) {
    // Stage x = silu(gate) * up into [T][Kv] vectors after the ring, only the K chunks of this CTA's
    // units (chunks c0, c0 + 1, ... mod cpt): every CTA reading all of gate_up at the same moment made
    // the kernel slower than silu_mul + gemv. Loads first (one L2 round trip per batch), then products.
    constexpr int kPer = 4;  // vectors per thread per batch
    constexpr int kThreadsC = kBulkConsumers * 32;
    uint4* xs = reinterpret_cast<uint4*>(smem + kBulkSmemBytes<kNT>);
    const int c0 = u_begin % cpt, per_tok = min(n, cpt) * kBulkUnitVecs, total = T * per_tok;
    for (int base = 0; base < total; base += kPer * kThreadsC) {
      uint4 gate[kPer], up[kPer];
      int dst[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = base + threadIdx.x + j * kThreadsC, tok = i / per_tok, r = i - tok * per_tok;
        int c = c0 + r / kBulkUnitVecs;
        if (c >= cpt) c -= cpt;
        const int v = c * kBulkUnitVecs + r % kBulkUnitVecs;
        dst[j] = i < total && v < Kv ? tok * Kv + v : -1;
        if (dst[j] >= 0) {
          gate[j] = __ldg(x + int64_t{tok} * x_pitch + v);
          up[j] = __ldg(x + int64_t{tok} * x_pitch + Kv + v);
        }
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        if (dst[j] >= 0) xs[dst[j]] = silu_mul8(gate[j], up[j]);
    }
    bulk_consumer_sync();
    xin = xs;
    xin_pitch = Kv;
  }
  const int g = lane >> 2, q = lane & 3;
  const uint4* xr[kNT];
  float acc[kNT][4];
  start_tiles<kNT>(xin, xin_pitch, g, T, xr, acc);
  for (int i = 0; i < n; ++i) {
    const int u = u_begin + i, stage = i % kBulkStages;
    const int tile = u / cpt, chunk = u - tile * cpt;
    const int vb = chunk * kBulkUnitVecs + warp * kBulkWarpSteps * kStepVecs;
    mbar_wait(&full[stage], static_cast<unsigned>(i / kBulkStages) & 1u);
    const unsigned char* st = stages + stage * kBulkStageBytes + warp * kBulkWarpSteps * kStepVecs * 16;
    uint4 lo[kBulkWarpSteps][kU], hi[kBulkWarpSteps][kU];
#pragma unroll
    for (int step = 0; step < kBulkWarpSteps; ++step) {
#pragma unroll
      for (int k = 0; k < kU; ++k) {  // vectors past Kv were not copied: zero (x is zero there too)
        const int v = step * kStepVecs + q + 4 * k;
        const bool in = vb + v < Kv;
        const unsigned char* p = st + v * 16;
        lo[step][k] = in ? *reinterpret_cast<const uint4*>(p + g * kBulkRowPitch) : make_uint4(0, 0, 0, 0);
        hi[step][k] = in ? *reinterpret_cast<const uint4*>(p + (g + 8) * kBulkRowPitch) : make_uint4(0, 0, 0, 0);
      }
    }
    mbar_arrive(&empty[stage]);  // the stage is in registers: the producer may refill it
#pragma unroll
    for (int step = 0; step < kBulkWarpSteps; ++step)
      mma_step<kNT, kSilu ? kXShared : kXGlobal>(acc, lo[step], hi[step], xr, vb + step * kStepVecs, Kv, q, Kv);
    if (chunk == cpt - 1 || i == n - 1) {
      float* mine = red + warp * kBulkTileFloats<kNT>;  // C fragment -> [16 rows][kTok]
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        mine[g * kTok + 8 * nt + 2 * q] = acc[nt][0];
        mine[g * kTok + 8 * nt + 2 * q + 1] = acc[nt][1];
        mine[(g + 8) * kTok + 8 * nt + 2 * q] = acc[nt][2];
        mine[(g + 8) * kTok + 8 * nt + 2 * q + 1] = acc[nt][3];
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
      }
      bulk_consumer_sync();
      bulk_finish_tile<kTok, kOutF32>(red, tile, u_begin, n, upc, cpt, T, N, out, bias, bias_dt, ws, counters,
                                      is_last);
      bulk_consumer_sync();  // red is reused by the next tile
    }
  }
#endif
}

}  // namespace nanovllm::cuda_ops::gemv_detail
