// The causal softmax attention of a prefill chunk's last queries over every key of the sequence, summed per key
// position ("vertical") and per diagonal d = query position - key position ("slash"), for every query head: what
// MInference's vertical-slash estimate (last_q rows, fp32 sums) and FlexPrefill's (the last block of rows, fp64 means)
// read. CPU references: kernels/cpu/vertical_slash_estimate.cpp, flexprefill_estimate.cpp.
//
// Four launches on the caller's stream:
//   stats       grid (key tiles of kKeys, KV heads): the tile's keys in shared memory (bf16, zero-padded to a multiple
//               of 16 dims), then per query head of the group and chunk of kRows rows, S = Q K^T by mma.sync (bf16 in,
//               fp32 out; 8 warps, each 16 rows x 64 keys), the causal mask, and per row the tile's max and
//               sum of exp(x - max) (fp64) -> [Hq, last, tiles];
//   row stats   one warp per row: the row's max and 1 / sum (fp64), combined over the tiles in a fixed order;
//   accumulate  the same tiles again: p = exp(x - max) / sum (the CPU's float probabilities, up to the scores'
//               rounding), staged in shared memory; per key the column sum over the rows (in row order: the CPU's
//               order) and per diagonal crossing the tile the partial sum along it;
//   slash       per (query head, diagonal) the partials of the tiles the diagonal crosses, in key order.
// x = scale x (q . k), as the CPU computes it, but the dot products are summed by the tensor cores in another order,
// from bf16 operands (F32 / F16 inputs are rounded to bf16 first): the sums differ from the CPU's by rounding only
// (~1e-6 relative), so the picks made from them agree except at near-ties. Everything is deterministic: no float
// atomics, every reduction in a fixed order.
//
// Dual Chunk Attention (Geometry::dca_chunk_len > 0, q [3, T, Hq, D]): a key tile (kKeys divides the chunk length)
// lies in one chunk, and each row of a query chunk is loaded in the rotation of that key chunk's region for the row
// (the row's own chunk, the previous one, or earlier), as the CPU's ChunkQueries scores it.
//
// An fp8 KV cache (bf16 q): the key tile is written as bf16(code x row scale) (kv_fp8.cuh, the dense prefill kernels'
// tile conversion), one more rounding than the CPU's f32 code x scale (relative 2^-9 per key, like the operands'
// bf16 rounding above): the sums differ from the CPU's on the fp8 cache by rounding only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/mma_utils.cuh"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/kv_cache.h"

namespace nanovllm::cuda_ops::lastq {

constexpr int kKeys = 128;                         // keys per tile (CTA)
constexpr int kRows = 64;                          // query rows per chunk of a tile
constexpr int kThreads = 256;                      // 8 warps: warp w holds rows 16 (w % 4) .. +16, keys 64 (w / 4) .. +64
constexpr int kMaxDim = 256;                       // head_dim limit (shared memory of the tiles)
constexpr int kDiagsPerChunk = kRows + kKeys - 1;  // diagonals crossing a chunk x tile rectangle
constexpr int kPStride = kKeys + 8;                // floats per staged probability row (conflict-free float2 stores)

struct Geometry {
  int T, ctx, Hq, Hk, D, BS;
  int last;     // rows: the chunk's last `last` queries (q rows T - last ..), at positions p0() .. ctx - 1
  int Dp;       // D rounded up to a multiple of 16 (the MMA's k step); the padding is zeros
  int ntiles;   // key tiles: ceil(ctx / kKeys)
  int nchunks;  // row chunks: ceil(last / kRows)
  float scale;
  int dca_chunk_len;   // > 0: Dual Chunk Attention, q [3, T, Hq, D] (a multiple of kKeys)
  int64_t rot_stride;  // elements between q's rotations: T Hq D
  __host__ __device__ int p0() const { return ctx - last; }
  __host__ __device__ int group() const { return Hq / Hk; }
  __host__ __device__ int stride() const { return Dp + 8; }  // bf16 per shared row (+16 B: ldmatrix conflict-free)
  // Diagonal partials per (query head, tile): chunk c's diagonals are entries [c kRows, c kRows + kDiagsPerChunk).
  __host__ __device__ int diag_width() const { return nchunks * kRows + kKeys - 1; }
};

// q [T, Hq, D], or with dca_chunk_len > 0 [3, T, Hq, D].
inline Geometry make_geometry(const TensorView& q, const TensorView& k_cache, int64_t ctx, int64_t last,
                              float scale, int64_t dca_chunk_len = 0) {
  Geometry g{};
  const int o = q.ndim() - 3;  // the rotation dimension, if any
  g.T = static_cast<int>(q.dim(o));
  g.Hq = static_cast<int>(q.dim(o + 1));
  g.D = static_cast<int>(q.dim(o + 2));
  g.dca_chunk_len = static_cast<int>(dca_chunk_len);
  g.rot_stride = int64_t{g.T} * g.Hq * g.D;
  g.BS = static_cast<int>(k_cache.dim(1));
  g.Hk = static_cast<int>(k_cache.dim(2));
  g.ctx = static_cast<int>(ctx);
  g.last = static_cast<int>(last);
  g.Dp = (g.D + 15) / 16 * 16;
  g.ntiles = (g.ctx + kKeys - 1) / kKeys;
  g.nchunks = (g.last + kRows - 1) / kRows;
  g.scale = scale;
  return g;
}

// The workspace of one run; Acc = float (vertical-slash: the CPU's fp32 sums) or double (FlexPrefill's fp64 means).
template <typename Acc>
struct Buffers {
  float* part_max = nullptr;   // [Hq, last, ntiles] per tile: the row's largest x
  double* part_sum = nullptr;  // [Hq, last, ntiles] per tile: sum of exp(x - part_max)
  float* row_max = nullptr;    // [Hq, last]
  double* row_inv = nullptr;   // [Hq, last] 1 / sum over the row of exp(x - row_max)
  Acc* vertical = nullptr;     // [Hq, ctx] out: sum (kMean: mean) over the rows of p at key k
  Acc* diag_part = nullptr;    // [Hq, ntiles, diag_width]
  Acc* slash = nullptr;        // [Hq, ctx] out: sum (kMean: mean) over the rows of p at diagonal d

  // Carved from a workspace (a carver without a base only counts the bytes).
  Buffers(WorkspaceCarver& ws, const Geometry& g) {
    const size_t rows = static_cast<size_t>(g.Hq) * g.last, tiles = static_cast<size_t>(g.ntiles);
    part_max = ws.take<float>(rows * tiles);
    part_sum = ws.take<double>(rows * tiles);
    row_max = ws.take<float>(rows);
    row_inv = ws.take<double>(rows);
    vertical = ws.take<Acc>(static_cast<size_t>(g.Hq) * g.ctx);
    slash = ws.take<Acc>(static_cast<size_t>(g.Hq) * g.ctx);
    diag_part = ws.take<Acc>(static_cast<size_t>(g.Hq) * tiles * g.diag_width());
  }
};

// ---- tiles ----

__device__ __forceinline__ int64_t cache_slot(const int32_t* bt, int k, int BS) {
  return int64_t{bt[k / BS]} * BS + k % BS;
}

// ks [kKeys][stride] bf16 = keys k0 .. k0 + kKeys - 1 of KV head h from k_cache [NB, BS, Hk, D] (zeros past ctx and in
// the padding dims). kVec: bf16 with D % 8 == 0 and 16-byte aligned tensors, 16-byte cp.async (the caller commits and
// waits); otherwise element by element, converted to bf16. K = uint8_t: fp8 codes with k_scale [NB, BS, Hk], written
// as bf16(code x scale) by plain stores (8 codes at a time with kVec).
template <typename K, bool kVec>
__device__ __forceinline__ void load_keys(const K* k_cache, const float* k_scale, const int32_t* bt, int h, int k0,
                                          const Geometry& g, __nv_bfloat16* ks) {
  const int S = g.stride();
  if constexpr (kVec && std::is_same_v<K, uint8_t>) {
    const int chunks = g.Dp / 8;
    for (int e = threadIdx.x; e < kKeys * chunks; e += blockDim.x) {
      const int r = e / chunks, c = e % chunks, k = k0 + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (k < g.ctx && c * 8 < g.D) {
        const int64_t row = cache_slot(bt, k, g.BS) * g.Hk + h;
        v = fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(k_cache + row * g.D + c * 8), k_scale[row]);
      }
      *reinterpret_cast<uint4*>(ks + r * S + c * 8) = v;
    }
  } else if constexpr (kVec) {
    const int chunks = g.Dp / 8;
    for (int e = threadIdx.x; e < kKeys * chunks; e += blockDim.x) {
      const int r = e / chunks, c = e % chunks, k = k0 + r;
      const bool valid = k < g.ctx && c * 8 < g.D;
      const K* src = valid ? k_cache + (cache_slot(bt, k, g.BS) * g.Hk + h) * g.D + c * 8 : k_cache;
      cp_async16_zfill(smem_u32(ks + r * S + c * 8), src, valid);
    }
  } else {
    for (int e = threadIdx.x; e < kKeys * g.Dp; e += blockDim.x) {
      const int r = e / g.Dp, d = e % g.Dp, k = k0 + r;
      float v[1] = {0.0f};
      if (k < g.ctx && d < g.D) load_kv_vec<K, 1>(k_cache, k_scale, cache_slot(bt, k, g.BS) * g.Hk + h, g.D, d, v);
      ks[r * S + d] = __float2bfloat16_rn(v[0]);
    }
  }
}

// Dual Chunk Attention: q row `row` (at position ctx - T + row) in the rotation it uses against key tile k0's keys.
template <typename T>
__device__ __forceinline__ const T* dca_rotation(const T* q, int row, int k0, const Geometry& g) {
  if (g.dca_chunk_len <= 0) return q;
  const int c = (g.ctx - g.T + row) / g.dca_chunk_len, kc = k0 / g.dca_chunk_len;
  return q + (kc >= c ? 0 : kc == c - 1 ? 1 : 2) * g.rot_stride;
}

// qs [kRows][stride] bf16 = rows chunk x kRows .. + kRows of the last rows of query head qh from q [T, Hq, D] (zeros past
// the last row and in the padding dims); with DCA each row in its rotation for key tile k0.
template <typename T, bool kVec>
__device__ __forceinline__ void load_queries(const T* q, int qh, int chunk, const Geometry& g, __nv_bfloat16* qs,
                                             int k0) {
  const int S = g.stride(), row0 = g.T - g.last + chunk * kRows;  // q row of the chunk's first row
  const int rows = min(kRows, g.last - chunk * kRows);
  if constexpr (kVec) {
    const int chunks = g.Dp / 8;
    for (int e = threadIdx.x; e < kRows * chunks; e += blockDim.x) {
      const int r = e / chunks, c = e % chunks;
      const bool valid = r < rows && c * 8 < g.D;
      const T* src = valid ? dca_rotation(q, row0 + r, k0, g) + (int64_t{row0 + r} * g.Hq + qh) * g.D + c * 8 : q;
      cp_async16_zfill(smem_u32(qs + r * S + c * 8), src, valid);
    }
  } else {
    for (int e = threadIdx.x; e < kRows * g.Dp; e += blockDim.x) {
      const int r = e / g.Dp, d = e % g.Dp;
      const T* qr = dca_rotation(q, row0 + r, k0, g);
      const float v = r < rows && d < g.D ? static_cast<float>(qr[(int64_t{row0 + r} * g.Hq + qh) * g.D + d]) : 0.0f;
      qs[r * S + d] = __float2bfloat16_rn(v);
    }
  }
}

// s = Q K^T of this warp's 16 rows x 64 keys: s[n][e] is row 16 (warp % 4) + lane / 4 + 8 (e / 2), key
// 64 (warp / 4) + 8 n + 2 (lane % 4) + e % 2 of the tile (the mma.sync accumulator layout, mma_utils.cuh).
__device__ __forceinline__ void score_chunk(const __nv_bfloat16* qs, const __nv_bfloat16* ks, const Geometry& g,
                                            float (&s)[8][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = g.stride();
  const unsigned a_addr = smem_u32(qs + (16 * (warp & 3) + (lane & 15)) * S + (lane >> 4) * 8);
  const unsigned b_addr = smem_u32(ks + 64 * (warp >> 2) * S + ldsm_b_offset(lane, S));
#pragma unroll
  for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  for (int kk = 0; kk < g.Dp / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4(a_addr + kk * 32, a[0], a[1], a[2], a[3]);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4(b_addr + (np * 16 * S + kk * 16) * 2, b0, b1, b2, b3);
      mma16816(s[2 * np], a, b0, b1);
      mma16816(s[2 * np + 1], a, b2, b3);
    }
  }
}

__device__ __forceinline__ double quad_sum_d(double v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Shared memory: the key tile, the query chunk, and (accumulate) the staged probabilities.
inline size_t tile_smem(const Geometry& g, bool staged) {
  return size_t{kKeys + kRows} * g.stride() * 2 + (staged ? size_t{kRows} * kPStride * 4 : 0);
}

// ---- kernels ----

// part_max / part_sum [Hq, last, ntiles]: per (query head, row, key tile), the largest x over the tile's causal keys
// (-inf: none) and the sum of exp(x - that max) over them.
template <typename T, typename K, bool kVec>
__global__ void __launch_bounds__(kThreads)
    stats_kernel(const T* __restrict__ q, const K* __restrict__ k_cache, const float* __restrict__ k_scale,
                 const int32_t* __restrict__ bt, Geometry g, float* __restrict__ part_max,
                 double* __restrict__ part_sum) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem);  // [kKeys][stride]
  __nv_bfloat16* qs = ks + kKeys * g.stride();         // [kRows][stride]
  __shared__ float red_max[2][kRows];                  // per key half of the tile
  __shared__ double red_sum[2][kRows];
  const int tile = blockIdx.x, h = blockIdx.y, k0 = tile * kKeys;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tq = lane & 3, half = warp >> 2;
  const int row0 = 16 * (warp & 3) + (lane >> 2);  // this thread's rows: row0 and row0 + 8 of the chunk
  const int key0 = k0 + 64 * half + 2 * tq;         // its keys: key0 + 8 n + c
  load_keys<K, kVec>(k_cache, k_scale, bt, h, k0, g, ks);
  for (int gi = 0; gi < g.group(); ++gi) {
    const int qh = h * g.group() + gi;
    for (int chunk = 0; chunk < g.nchunks; ++chunk) {
      __syncthreads();  // the previous chunk's readers of qs and red_* are done
      load_queries<T, kVec>(q, qh, chunk, g, qs, k0);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      float s[8][4];
      score_chunk(qs, ks, g, s);
      float mx[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int lr = chunk * kRows + row0 + 8 * hh, pos = g.p0() + lr;
        mx[hh] = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            if (lr < g.last && key0 + 8 * n + c <= pos) mx[hh] = fmaxf(mx[hh], __fmul_rn(g.scale, s[n][2 * hh + c]));
        mx[hh] = quad_max(mx[hh]);
        if (tq == 0) red_max[half][row0 + 8 * hh] = mx[hh];
      }
      __syncthreads();
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row0 + 8 * hh, lr = chunk * kRows + r, pos = g.p0() + lr;
        const float m = fmaxf(red_max[0][r], red_max[1][r]);
        double sum = 0;
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            if (lr < g.last && key0 + 8 * n + c <= pos)
              sum += static_cast<double>(expf(__fmul_rn(g.scale, s[n][2 * hh + c]) - m));
        sum = quad_sum_d(sum);
        if (tq == 0) red_sum[half][r] = sum;
      }
      __syncthreads();
      const int r = threadIdx.x, lr = chunk * kRows + r;
      if (r < kRows && lr < g.last) {
        const int64_t at = (int64_t{qh} * g.last + lr) * g.ntiles + tile;
        part_max[at] = fmaxf(red_max[0][r], red_max[1][r]);
        part_sum[at] = red_sum[0][r] + red_sum[1][r];
      }
    }
  }
}

// row_max / row_inv [Hq, last]: one warp per row (kRowsPerCta warps per CTA) combines the tiles' partials in a fixed
// order.
template <int kRowsPerCta>
__global__ void __launch_bounds__(32 * kRowsPerCta)
    row_stats_kernel(const float* __restrict__ part_max, const double* __restrict__ part_sum, Geometry g,
                     float* __restrict__ row_max, double* __restrict__ row_inv) {
  const int64_t row = int64_t{blockIdx.x} * kRowsPerCta + threadIdx.x / 32;  // qh x last + lr
  const int lane = threadIdx.x & 31;
  if (row >= int64_t{g.Hq} * g.last) return;
  const float* pm = part_max + row * g.ntiles;
  const double* ps = part_sum + row * g.ntiles;
  float m = -INFINITY;
  for (int t = lane; t < g.ntiles; t += 32) m = fmaxf(m, pm[t]);
  m = warp_max(m);
  double sum = 0;
  for (int t = lane; t < g.ntiles; t += 32)
    if (pm[t] > -INFINITY) sum += ps[t] * exp(static_cast<double>(pm[t]) - static_cast<double>(m));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    row_max[row] = m;
    row_inv[row] = 1.0 / sum;  // > 0: every row sees key 0
  }
}

// vertical [Hq, ctx]: the CTA's keys, summed over all rows in row order; diag_part [Hq, ntiles, diag_width]: the
// tile's partial sums along the diagonals crossing it. Acc float: fp32 sums (the CPU's); double: fp64, and kMean
// divides the vertical sums by `last`.
template <typename T, typename K, bool kVec, typename Acc, bool kMean>
__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(const T* __restrict__ q, const K* __restrict__ k_cache, const float* __restrict__ k_scale,
                      const int32_t* __restrict__ bt, Geometry g, const float* __restrict__ row_max,
                      const double* __restrict__ row_inv,
                      Acc* __restrict__ vertical, Acc* __restrict__ diag_part) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem);                    // [kKeys][stride]
  __nv_bfloat16* qs = ks + kKeys * g.stride();                           // [kRows][stride]
  auto* ps = reinterpret_cast<float*>(qs + kRows * g.stride());          // [kRows][kPStride]
  const int tile = blockIdx.x, h = blockIdx.y, k0 = tile * kKeys, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5, tq = lane & 3, half = warp >> 2;
  const int row0 = 16 * (warp & 3) + (lane >> 2);
  const int col0 = 64 * half + 2 * tq;  // this thread's keys in the tile: col0 + 8 n + c
  const int W = g.diag_width();
  load_keys<K, kVec>(k_cache, k_scale, bt, h, k0, g, ks);
  for (int gi = 0; gi < g.group(); ++gi) {
    const int qh = h * g.group() + gi;
    Acc* diag = diag_part + (int64_t{qh} * g.ntiles + tile) * W;  // entry u: diagonal p0 - k0 - (kKeys - 1) + u
    for (int u = tid; u < W; u += kThreads) diag[u] = Acc(0);
    Acc column = 0;  // thread tid < kKeys: key k0 + tid
    for (int chunk = 0; chunk < g.nchunks; ++chunk) {
      __syncthreads();  // the previous chunk's readers of qs and ps are done; diag's zeros are visible
      load_queries<T, kVec>(q, qh, chunk, g, qs, k0);
      cp_async_commit();
      cp_async_wait<0>();
      __syncthreads();
      float s[8][4];
      score_chunk(qs, ks, g, s);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int r = row0 + 8 * hh, lr = chunk * kRows + r, pos = g.p0() + lr;
        const bool row_ok = lr < g.last;
        const float m = row_ok ? row_max[int64_t{qh} * g.last + lr] : 0.0f;
        const double inv = row_ok ? row_inv[int64_t{qh} * g.last + lr] : 0.0;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          float p[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = col0 + 8 * n + c;
            // The CPU's p: float(exp(x - max) / sum), the quotient taken in double.
            p[c] = row_ok && k0 + col <= pos
                       ? static_cast<float>(static_cast<double>(expf(__fmul_rn(g.scale, s[n][2 * hh + c]) - m)) * inv)
                       : 0.0f;
          }
          *reinterpret_cast<float2*>(ps + r * kPStride + col0 + 8 * n) = make_float2(p[0], p[1]);
        }
      }
      __syncthreads();
      const int rows = min(kRows, g.last - chunk * kRows);
      if (tid < kKeys)
        for (int r = 0; r < rows; ++r) column += static_cast<Acc>(ps[r * kPStride + tid]);
      // Chunk diagonal delta = r - col + kKeys - 1 holds (r, col = r + kKeys - 1 - delta); in row order.
      for (int delta = tid; delta < kDiagsPerChunk; delta += kThreads) {
        Acc a = 0;
        for (int r = 0; r < rows; ++r) {
          const int col = r + kKeys - 1 - delta;
          if (col >= 0 && col < kKeys) a += static_cast<Acc>(ps[r * kPStride + col]);
        }
        diag[chunk * kRows + delta] += a;  // entries shared with the previous chunk: it is done (synced above)
      }
    }
    if (tid < kKeys && k0 + tid < g.ctx)
      vertical[int64_t{qh} * g.ctx + k0 + tid] = kMean ? column / static_cast<Acc>(g.last) : column;
  }
}

// slash [Hq, ctx]: diagonal d's keys are [max(0, p0 - d), ctx - 1 - d]; the partials of their tiles, in key order.
template <typename Acc, bool kMean>
__global__ void slash_kernel(const Acc* __restrict__ diag_part, Geometry g, Acc* __restrict__ slash) {
  const int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // qh x ctx + d
  if (e >= int64_t{g.Hq} * g.ctx) return;
  const int qh = static_cast<int>(e / g.ctx), d = static_cast<int>(e % g.ctx);
  const int k_lo = max(0, g.p0() - d), k_hi = g.ctx - 1 - d;
  const int W = g.diag_width();
  Acc acc = 0;
  for (int tile = k_lo / kKeys; tile <= k_hi / kKeys; ++tile) {
    const int u = d - (g.p0() - tile * kKeys - (kKeys - 1));  // in [0, last + kKeys - 1): see accumulate_kernel
    acc += diag_part[(int64_t{qh} * g.ntiles + tile) * W + u];
  }
  slash[e] = kMean ? acc / static_cast<Acc>(g.last) : acc;
}

// ---- host ----

template <typename T, typename K, bool kVec, typename Acc, bool kMean>
void run_as(const void* q, const KvCacheTensor& k_cache, const int32_t* bt, const Geometry& g, const Buffers<Acc>& b,
            cudaStream_t st) {
  const size_t stats_smem = tile_smem(g, false), acc_smem = tile_smem(g, true);
  CUDA_CHECK(cudaFuncSetAttribute(stats_kernel<T, K, kVec>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(stats_smem)));
  CUDA_CHECK(cudaFuncSetAttribute(accumulate_kernel<T, K, kVec, Acc, kMean>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(acc_smem)));
  const dim3 tiles(static_cast<unsigned>(g.ntiles), static_cast<unsigned>(g.Hk));
  const auto* keys = static_cast<const K*>(k_cache.data());
  const float* k_scale = k_cache.fp8() ? k_cache.scale.data_as<const float>() : nullptr;
  stats_kernel<T, K, kVec><<<tiles, kThreads, stats_smem, st>>>(static_cast<const T*>(q), keys, k_scale, bt, g,
                                                                 b.part_max, b.part_sum);
  CUDA_CHECK(cudaGetLastError());
  constexpr int kRowsPerCta = 8;
  row_stats_kernel<kRowsPerCta><<<ceil_div_u(int64_t{g.Hq} * g.last, kRowsPerCta), 32 * kRowsPerCta, 0, st>>>(
      b.part_max, b.part_sum, g, b.row_max, b.row_inv);
  CUDA_CHECK(cudaGetLastError());
  accumulate_kernel<T, K, kVec, Acc, kMean><<<tiles, kThreads, acc_smem, st>>>(
      static_cast<const T*>(q), keys, k_scale, bt, g, b.row_max, b.row_inv, b.vertical, b.diag_part);
  CUDA_CHECK(cudaGetLastError());
  slash_kernel<Acc, kMean><<<ceil_div_u(int64_t{g.Hq} * g.ctx, 256), 256, 0, st>>>(b.diag_part, g, b.slash);
  CUDA_CHECK(cudaGetLastError());
}

// The four launches for q's element type (q and k_cache of one float dtype, or bf16 q and an fp8 cache: checked by
// the caller, as D <= kMaxDim).
template <typename Acc, bool kMean>
void run(const TensorView& q, const KvCacheTensor& k_cache, const int32_t* bt, const Geometry& g,
         const Buffers<Acc>& b, cudaStream_t st) {
  const bool vec = g.D % 8 == 0 && aligned16(q.data()) && aligned16(k_cache.data());
  if (k_cache.fp8()) {
    if (vec) return run_as<__nv_bfloat16, uint8_t, true, Acc, kMean>(q.data(), k_cache, bt, g, b, st);
    return run_as<__nv_bfloat16, uint8_t, false, Acc, kMean>(q.data(), k_cache, bt, g, b, st);
  }
  if (q.dtype() == DType::kBF16) {
    if (vec) return run_as<__nv_bfloat16, __nv_bfloat16, true, Acc, kMean>(q.data(), k_cache, bt, g, b, st);
    return run_as<__nv_bfloat16, __nv_bfloat16, false, Acc, kMean>(q.data(), k_cache, bt, g, b, st);
  }
  if (q.dtype() == DType::kF16) return run_as<__half, __half, false, Acc, kMean>(q.data(), k_cache, bt, g, b, st);
  run_as<float, float, false, Acc, kMean>(q.data(), k_cache, bt, g, b, st);
}

}  // namespace nanovllm::cuda_ops::lastq
