// The keyscore decode policy's 4-bit key copy and page scores on CUDA (contracts: kernels/sparse_ops.h). Both kernels
// are PDL-launched (pdl.cuh) and wait before reading anything of the step but its metadata (context_lens).
// - int4_keys_update: a warp per (token, KV head) row: the row's values as f32 (bf16, or fp8 code x scale), the
//   warp's max |x|, then each lane quantizes pairs of dims into bytes. The f32 operations are the CPU's (IEEE
//   division, round half to even), so the codes and scales are bit-identical.
// - int4_key_scores: tensor cores (mma.sync m16n8k16 bf16, f32 accumulators): a warp takes 16 keys x up to 8
//   query heads of the GQA group per MMA, the codes turned into exact bf16 by bit tricks (see the kernel), so it
//   runs near its bytes: a 128K context (8192 pages of 16) and 8 KV heads read 71 MB of codes and scales per layer.
//   The old lane-per-key kernel (one shared-memory load and one FMA per code and head) was issue-bound at ~0.8 TB/s.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/mma_utils.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---- int4_keys_update ----
constexpr int kUpdateWarps = 4;

// Grid (tokens, ceil(Hk / kUpdateWarps)). k_cache [NB, BS, Hk, D] (bf16, or fp8 codes with k_scale [NB, BS, Hk]);
// codes [NB, Hk, BS, D / 2], scales [NB, Hk, BS].
__global__ void __launch_bounds__(kUpdateWarps * 32)
    int4_keys_update_kernel(uint8_t* __restrict__ codes, float* __restrict__ scales, const void* __restrict__ k_cache,
                            const float* __restrict__ k_scale, const int32_t* __restrict__ slots, int block_size,
                            int hk, int d) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31, h = blockIdx.y * kUpdateWarps + (threadIdx.x >> 5);
  const int slot = slots[blockIdx.x];
  if (slot < 0 || h >= hk) return;
  const int64_t row = int64_t{slot} * hk + h;  // the cache row (slot x Hk + head)
  const auto value = [&](int e) {
    if (k_scale == nullptr) return __bfloat162float(static_cast<const __nv_bfloat16*>(k_cache)[row * d + e]);
    return fp8_e4m3_value(static_cast<const uint8_t*>(k_cache)[row * d + e]) * k_scale[row];
  };
  float amax = 0.0f;
  for (int e = lane; e < d; e += 32) amax = fmaxf(amax, fabsf(value(e)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
  const float scale = amax > 0.0f ? __fdiv_rn(amax, 7.0f) : 1.0f;
  const int block = slot / block_size, offset = slot % block_size;
  const int64_t out_row = (int64_t{block} * hk + h) * block_size + offset;
  const auto nibble = [&](int e) {
    const float c = fminf(fmaxf(rintf(__fdiv_rn(value(e), scale)), -7.0f), 7.0f);
    return static_cast<unsigned>(static_cast<int>(c) + 8);
  };
  for (int pair = lane; pair < d / 2; pair += 32)
    codes[out_row * (d / 2) + pair] = static_cast<uint8_t>(nibble(2 * pair) | (nibble(2 * pair + 1) << 4));
  if (lane == 0) scales[out_row] = scale;
}

// ---- int4_key_scores ----
constexpr int kScoreWarps = 8;
constexpr int kKeysPerCta = 2048;  // 128 pages of 16: a 128K context's 8 KV heads make 512 CTAs
constexpr int kScoreCtasPerSm = 4;  // <= 64 registers (D <= 128): 132 SMs hold 528 CTAs, the 128K grid in one wave

// A fragment register (two bf16) from the nibbles at bits [shift, shift + 4) and [16 + shift, 20 + shift) of a
// word of codes: 0x4300 | n is the bf16 128 + n, and an exact bf16x2 FMA (x 1 - 136) makes it n - 8.
__device__ __forceinline__ uint32_t nibble_pair(uint32_t word, int shift) {
  const uint32_t biased = ((word >> shift) & 0x000f000fu) | 0x43004300u;
  uint32_t out;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(out) : "r"(biased), "r"(0x3f803f80u), "r"(0xc308c308u));
  return out;
}

// The kWords 32-bit words of codes a lane holds of one key row (16-byte loads when they fit).
template <int kWords>
__device__ __forceinline__ void load_codes(uint32_t (&w)[kWords], const uint8_t* src) {
  if constexpr (kWords % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(src) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (kWords % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kWords / 2; ++i) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(src) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = __ldg(reinterpret_cast<const uint32_t*>(src) + i);
  }
}

// Grid (S x Hk, ceil(MP / pages_per_cta)), kScoreWarps warps; q [S, Hq, D] bf16 with D = 32 kWords; scores
// [S, Hk, MP]. Tensor cores: a warp takes 16 keys of the CTA's pages at a time (a tile; keys are numbered across
// the pages, so a tile may span pages) and computes their dots with up to 8 query heads of the group per pass by
// D / 16 mma.sync m16n8k16 (A = the keys' codes as bf16, B = the heads' queries, f32 accumulators).
// Dimension order: lane 4 gq + tq holds rows gq and gq + 8 of A (keys) and loads each row's dims
// [tq D / 4, (tq + 1) D / 4), i.e. kWords words; MMA step 2 i + b takes word i's nibbles at shifts 8 b (a0 / a1:
// dims 8 i + 2 b and + 4, the k-slots 2 tq, 2 tq + 1) and 8 b + 4 (a2 / a3: dims 8 i + 2 b + 1 and + 5, k-slots
// 2 tq + 8, 2 tq + 9). The k order inside an MMA is free as long as B follows it: q is staged in shared memory
// already in fragment order, qf[pass][step][lane] = that lane's {b0, b1} (zero for heads past the group).
// Each key's max over the heads, times its scale (> 0), goes to shared memory; then a thread per page takes the
// max over its keys (positions < context) and writes the score, -inf for pages past the context.
template <int kWords>
__global__ void __launch_bounds__(kScoreWarps * 32, kWords <= 4 ? kScoreCtasPerSm : kScoreCtasPerSm / 2)
    int4_key_scores_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ q,
                           const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                           const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens, int hq,
                           int hk, int max_pages, int max_blocks, int block_size, int pages_per_cta) {
  constexpr int kD = 32 * kWords, kSteps = kD / 16;
  constexpr int kTiles = kWords <= 4 ? 2 : 1;  // tiles whose codes a warp loads before computing: loads in flight
  extern __shared__ uint2 smem[];  // qf [passes, kSteps, 32] {b0, b1}, then key_max [pages_per_cta x block_size] f32
  const int item = blockIdx.x, s = item / hk, h = item % hk, g_count = hq / hk, passes = (g_count + 7) / 8;
  uint2* qf = smem;
  float* key_max = reinterpret_cast<float*>(smem + passes * kSteps * 32);
  const int ctx = context_lens[s];  // step metadata: readable before the wait (pdl.cuh)
  pdl_wait();
  pdl_trigger();
  const int pages = (ctx + block_size - 1) / block_size;
  const int p_begin = blockIdx.y * pages_per_cta, p_end = min(max_pages, p_begin + pages_per_cta);
  const int key_begin = p_begin * block_size;
  const int keys = max(0, min(ctx, p_end * block_size) - key_begin);  // the CTA's keys, numbered from key_begin

  const __nv_bfloat16* qh = q + (int64_t{s} * hq + int64_t{h} * g_count) * kD;
  for (int e = threadIdx.x; e < passes * kSteps * 32; e += blockDim.x) {
    const int ln = e & 31, step = (e >> 5) % kSteps, n = (e >> 5) / kSteps * 8 + (ln >> 2);
    uint2 v{0u, 0u};
    if (n < g_count) {
      const __nv_bfloat16* qd = qh + n * kD + (ln & 3) * (kD / 4) + (step >> 1) * 8 + (step & 1) * 2;
      const __nv_bfloat162 b0 = __halves2bfloat162(qd[0], qd[4]), b1 = __halves2bfloat162(qd[1], qd[5]);
      v.x = *reinterpret_cast<const uint32_t*>(&b0);
      v.y = *reinterpret_cast<const uint32_t*>(&b1);
    }
    qf[e] = v;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  const int tiles = (keys + 15) / 16;
  for (int tile0 = warp * kTiles; tile0 < tiles; tile0 += kScoreWarps * kTiles) {
    uint32_t raw[kTiles][2][kWords];
    float scale[kTiles];  // lane tq = 0: row gq's, tq = 1: row gq + 8's (the lane that writes that row's max)
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      // The tile's first key's page (one division per tile), then the lane's two rows by stepping over pages.
      const int first = (tile0 + i) * 16, first_page = (key_begin + first) / block_size;
      int p = first_page, j = key_begin + first - first_page * block_size + gq;
      scale[i] = 0.0f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (r == 1) j += 8;
        while (j >= block_size) j -= block_size, ++p;
        const int l = first + gq + 8 * r;  // the row's key, numbered from key_begin
#pragma unroll
        for (int w = 0; w < kWords; ++w) raw[i][r][w] = 0u;
        if (l < keys) {
          const int64_t row = (int64_t{block_tables[int64_t{s} * max_blocks + p]} * hk + h) * block_size + j;
          load_codes(raw[i][r], codes + row * (kD / 2) + tq * (kWords * 4));
          if (tq == r) scale[i] = __ldg(scales + row);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      if (tile0 + i >= tiles) continue;  // warp-uniform: the MMAs and shuffles need the whole warp
      float best[2] = {-INFINITY, -INFINITY};  // rows gq, gq + 8: max over this lane's heads
#pragma unroll 1
      for (int pass = 0; pass < passes; ++pass) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint2* b = qf + pass * kSteps * 32 + lane;
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const uint32_t a[4] = {nibble_pair(raw[i][0][w], 8 * half), nibble_pair(raw[i][1][w], 8 * half),
                                   nibble_pair(raw[i][0][w], 8 * half + 4), nibble_pair(raw[i][1][w], 8 * half + 4)};
            const uint2 bv = b[(2 * w + half) * 32];
            mma16816(c, a, bv.x, bv.y);
          }
        }
        const int n0 = pass * 8 + 2 * tq;  // c: rows gq (c0, c1) and gq + 8 (c2, c3), heads n0 and n0 + 1
        if (n0 < g_count) best[0] = fmaxf(best[0], c[0]), best[1] = fmaxf(best[1], c[2]);
        if (n0 + 1 < g_count) best[0] = fmaxf(best[0], c[1]), best[1] = fmaxf(best[1], c[3]);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m = quad_max(best[r]);
        const int l = (tile0 + i) * 16 + gq + 8 * r;
        if (tq == r && l < keys) key_max[l] = scale[i] * m;  // scale > 0: the max of the products
      }
    }
  }
  __syncthreads();

  for (int pl = threadIdx.x; pl < p_end - p_begin; pl += blockDim.x) {
    const int p = p_begin + pl;
    float best = -INFINITY;
    if (p < pages) {
      const int n = min(block_size, ctx - p * block_size);
      const float* km = key_max + pl * block_size;
      int j = pl % n;  // a rotated start: neighbouring threads' pages sit block_size floats apart (bank conflicts)
      for (int k = 0; k < n; ++k) {
        best = fmaxf(best, km[j]);
        if (++j == n) j = 0;
      }
    }
    scores[int64_t{item} * max_pages + p] = best;
  }
}

}  // namespace

void int4_keys_update(TensorView codes, TensorView scales, const KvCacheTensor& k_cache, TensorView slot_mapping,
                      ops::Stream s) {
  NANOVLLM_CHECK(k_cache.dtype() == DType::kBF16 || k_cache.fp8(),
                 "int4_keys_update (cuda): the KV cache must be BF16 or fp8, got ", dtype_name(k_cache.dtype()));
  const int T = static_cast<int>(slot_mapping.dim(0)), hk = static_cast<int>(k_cache.dim(2));
  if (T == 0) return;
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>((hk + kUpdateWarps - 1) / kUpdateWarps));
  launch_pdl(int4_keys_update_kernel, grid, dim3(kUpdateWarps * 32), 0, s, codes.data_as<uint8_t>(),
             scales.data_as<float>(), k_cache.data(), k_cache.fp8() ? k_cache.scale.data_as<const float>() : nullptr,
             slot_mapping.data_as<const int32_t>(), static_cast<int>(k_cache.dim(1)), hk,
             static_cast<int>(k_cache.dim(3)));
}

void int4_key_scores(TensorView scores, TensorView q, TensorView codes, TensorView scales, TensorView block_tables,
                     TensorView context_lens, int64_t block_size, ops::Stream s) {
  NANOVLLM_CHECK(q.dtype() == DType::kBF16, "int4_key_scores (cuda): q must be BF16, got ", dtype_name(q.dtype()));
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hk = codes.dim(1), MP = scores.dim(2);
  NANOVLLM_CHECK(D % 32 == 0 && D >= 32 && D <= 256, "int4_key_scores (cuda): head_dim ", D,
                 " (a multiple of 32 up to 256)");
  NANOVLLM_CHECK(reinterpret_cast<uintptr_t>(codes.data()) % 16 == 0,
                 "int4_key_scores (cuda): codes must be 16-byte aligned");
  if (S == 0 || MP == 0) return;
  const int bs = static_cast<int>(block_size);
  const int pages_per_cta = std::max(1, kKeysPerCta / bs);
  const dim3 grid(static_cast<unsigned>(S * Hk), static_cast<unsigned>((MP + pages_per_cta - 1) / pages_per_cta));
  const int64_t passes = (Hq / Hk + 7) / 8;
  const size_t smem = static_cast<size_t>(passes * (D / 16) * 32) * sizeof(uint2) +
                      static_cast<size_t>(pages_per_cta) * static_cast<size_t>(bs) * sizeof(float);
  const auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(smem)));
    launch_pdl(kernel, grid, dim3(kScoreWarps * 32), smem, s, scores.data_as<float>(),
               q.data_as<const __nv_bfloat16>(), codes.data_as<const uint8_t>(), scales.data_as<const float>(),
               block_tables.data_as<const int32_t>(), context_lens.data_as<const int32_t>(), static_cast<int>(Hq),
               static_cast<int>(Hk), static_cast<int>(MP), static_cast<int>(block_tables.dim(1)), bs, pages_per_cta);
  };
  switch (D / 32) {
    case 1: return launch(int4_key_scores_kernel<1>);
    case 2: return launch(int4_key_scores_kernel<2>);
    case 3: return launch(int4_key_scores_kernel<3>);
    case 4: return launch(int4_key_scores_kernel<4>);
    case 5: return launch(int4_key_scores_kernel<5>);
    case 6: return launch(int4_key_scores_kernel<6>);
    case 7: return launch(int4_key_scores_kernel<7>);
    default: return launch(int4_key_scores_kernel<8>);
  }
}

}  // namespace nanovllm::cuda_ops
