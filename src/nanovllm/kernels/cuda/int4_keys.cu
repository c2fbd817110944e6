// The keyscore decode policy's 4-bit key copy and page scores on CUDA (contracts: kernels/sparse_ops.h). Both kernels
// are PDL-launched (pdl.cuh) and wait before reading anything of the step.
// - int4_keys_update: a warp per (token, KV head) row: the row's values as f32 (bf16, or fp8 code x scale), the
//   warp's max |x|, then each lane quantizes pairs of dims into bytes. The f32 operations are the CPU's (IEEE
//   division, round half to even), so the codes and scales are bit-identical.
// - int4_key_scores: a lane per key. A group of W lanes (W = the block size when it divides 32, else 32) takes one
//   page, each lane its keys j, j + W, ...: the key's D / 2 bytes of codes by 16-byte loads, each code turned into a
//   float by a bit trick (no conversion instruction), one FMA per code and query head of the GQA group (the group's
//   queries are in shared memory: every lane of a warp reads the same element, a broadcast), then the page's max by
//   W-lane shuffles. A 128K context (8192 pages of 16) and 8 KV heads read 69 MB of codes per layer.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
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
constexpr int kScoreThreads = 256;
constexpr int kKeysPerCta = 2048;  // 128 pages of 16: a 128K context's 8 KV heads make 512 CTAs

// Nibble n (0..15) as the float n - 8: 2^23 + n has n in its mantissa's low bits.
__device__ __forceinline__ float nibble_value(uint32_t word, int shift) {
  return __uint_as_float(0x4b000000u | ((word >> shift) & 15u)) - 8388616.0f;  // 8388616 = 2^23 + 8
}

// Grid (S x Hk, ceil(MP / pages_per_cta)); q [S, Hq, D] bf16; scores [S, Hk, MP]. kG: query heads held in registers
// at once (>= the GQA group when it fits, else the group in chunks of kG). W: lanes per page (a power of two <= 32).
template <int kG>
__global__ void __launch_bounds__(kScoreThreads)
    int4_key_scores_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ q,
                           const uint8_t* __restrict__ codes, const float* __restrict__ scales,
                           const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens, int hq,
                           int hk, int d, int max_pages, int max_blocks, int block_size, int w, int pages_per_cta) {
  extern __shared__ float qs[];  // [G, D]
  const int item = blockIdx.x, s = item / hk, h = item % hk, g_count = hq / hk;
  const int ctx = context_lens[s];
  const int pages = (ctx + block_size - 1) / block_size;
  pdl_wait();
  pdl_trigger();
  for (int e = threadIdx.x; e < g_count * d; e += blockDim.x)
    qs[e] = __bfloat162float(q[(int64_t{s} * hq + int64_t{h} * g_count) * d + e]);
  __syncthreads();
  const int lane = threadIdx.x & 31, sub = lane % w;
  const int groups_per_cta = kScoreThreads / w;
  const int p_begin = blockIdx.y * pages_per_cta, p_end = min(max_pages, p_begin + pages_per_cta);
  const int chunks = d / 32;  // 16-byte loads (32 codes) per key
  // Every lane of a warp runs the same number of iterations (page_base is uniform over the warp): the shuffles
  // need the whole warp.
  for (int page_base = p_begin + (threadIdx.x >> 5) * (32 / w); page_base < p_end; page_base += groups_per_cta) {
    const int p = page_base + lane / w;
    float best = -INFINITY;
    if (p < min(pages, p_end)) {
      const int64_t block = block_tables[int64_t{s} * max_blocks + p];
      const int keys = min(block_size, ctx - p * block_size);
      for (int j = sub; j < keys; j += w) {
        const int64_t r = (block * hk + h) * block_size + j;
        const uint4* key = reinterpret_cast<const uint4*>(codes + r * (d / 2));
        const float scale = scales[r];
        for (int g0 = 0; g0 < g_count; g0 += kG) {
          float acc[kG];
#pragma unroll
          for (int g = 0; g < kG; ++g) acc[g] = 0.0f;
          for (int c = 0; c < chunks; ++c) {
            const uint4 raw = key[c];
            const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
              for (int b = 0; b < 8; ++b) {  // dims c 32 + 8 i + b: byte b / 2, low nibble first
                const float k = nibble_value(words[i], 4 * b);
                const float* qd = qs + g0 * d + c * 32 + i * 8 + b;
#pragma unroll
                for (int g = 0; g < kG; ++g)
                  if (g0 + g < g_count) acc[g] = fmaf(qd[g * d], k, acc[g]);
              }
            }
          }
#pragma unroll
          for (int g = 0; g < kG; ++g)
            if (g0 + g < g_count) best = fmaxf(best, scale * acc[g]);
        }
      }
    }
    for (int o = w / 2; o > 0; o >>= 1) best = fmaxf(best, __shfl_xor_sync(kFull, best, o));
    if (sub == 0 && p < p_end) scores[int64_t{item} * max_pages + p] = p < pages ? best : -INFINITY;
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
  if (S == 0 || MP == 0) return;
  const int bs = static_cast<int>(block_size);
  const int w = (bs <= 32 && 32 % bs == 0) ? bs : 32;  // lanes per page
  const int pages_per_cta = std::max(kScoreThreads / w, kKeysPerCta / bs / (kScoreThreads / w) * (kScoreThreads / w));
  const dim3 grid(static_cast<unsigned>(S * Hk), static_cast<unsigned>((MP + pages_per_cta - 1) / pages_per_cta));
  const int64_t G = Hq / Hk;
  const size_t smem = static_cast<size_t>(G * D) * sizeof(float);
  const auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(smem)));
    launch_pdl(kernel, grid, dim3(kScoreThreads), smem, s, scores.data_as<float>(), q.data_as<const __nv_bfloat16>(),
               codes.data_as<const uint8_t>(), scales.data_as<const float>(), block_tables.data_as<const int32_t>(),
               context_lens.data_as<const int32_t>(), static_cast<int>(Hq), static_cast<int>(Hk), static_cast<int>(D),
               static_cast<int>(MP), static_cast<int>(block_tables.dim(1)), bs, w, pages_per_cta);
  };
  if (G <= 2) return launch(int4_key_scores_kernel<2>);
  if (G <= 4) return launch(int4_key_scores_kernel<4>);
  if (G <= 8) return launch(int4_key_scores_kernel<8>);
  launch(int4_key_scores_kernel<16>);
}

}  // namespace nanovllm::cuda_ops
