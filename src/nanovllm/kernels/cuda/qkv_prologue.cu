// Fused attention prologue: optional per-head q/k RMSNorm, RoPE on q and k (rotate_half, or GLM-4's
// interleaved pairs (2i, 2i + 1) on the first 2 * pairs elements, ops::RopeParams), q -> q_out[t, h, :],
// k/v -> caches at slot_mapping[t] (slot -1: padding token, nothing cached; q still written).
// Per block: one token and a group of its Hq + 2 Hk heads (q heads, then k heads, then v heads). The block
// first puts cos/sin of angle = float(pos) * inv_freq[i] (fp32, accurate sincosf), times attention_scaling,
// in shared memory, then its warps take the heads. Small T: a few heads per block, so a decode step still
// spreads over several blocks; large T: all heads of the token per block (the grid is wide already and the
// table is then computed once per token).
//
// Two kernels:
//  * vec (all bf16, D = 8 * lanes_per_head with lanes_per_head in {2, 4, 8, 16, 32}, 16-byte aligned rows):
//    a head is lanes_per_head lanes of a warp, each holding 8 consecutive elements (one 16-byte load and
//    store); the first half of the lanes holds the first half of the head, so the RoPE partner of element i
//    is the same register of lane ^ (lanes_per_head / 2). A warp takes 32 / lanes_per_head heads at once.
//    Measured need: the generic kernel's 2-byte accesses ran at 1.3 TB/s at T = 8192.
//  * generic (run-time dtypes, any even D <= 512): one warp per head, lane i holding the pairs (i, i + D/2)
//    (interleaved: (2i, 2i + 1)). It also writes an fp8 cache (kv_fp8.cuh): the warp's max |x| gives the row's
//    scale, each lane stores its codes, lane 0 the scale.
// Both: RMSNorm over D in fp32 (w * (x * r)), RoPE in fp32, one rounding to the output dtype; math order as
// kernels/cpu/qkv_prologue.cpp.
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/qkv_rope.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kMaxPairsPerLane = 8;  // D <= 512
constexpr int kWarps = 4;
// Up to this many tokens a block takes one pass of its warps over heads; beyond, all of a token's heads.
constexpr int64_t kSplitHeadsMaxTokens = 1024;

// kPairs: RoPE pairs per lane, ceil(D / 64) rounded up to a power of two (register arrays sized to D).
template <int kPairs>
__global__ void __launch_bounds__(kWarps * 32, 1)
qkv_prologue_kernel(void* q_out, int q_dt, const void* qkv, int qkv_dt, const void* q_norm, int qn_dt,
                    const void* k_norm, int kn_dt, float eps, const int32_t* __restrict__ positions,
                    const float* __restrict__ inv_freq, int pairs, bool interleaved, float attn_scaling,
                    void* k_cache, int k_dt, void* v_cache, int v_dt, float* k_scale, float* v_scale,
                    const int32_t* __restrict__ slots, int Hq, int Hk, int D, int heads_per_block) {
  extern __shared__ float cs[];  // [D/2] cos, [D/2] sin
  const int half = D / 2;
  const int64_t t = blockIdx.x;
  const float* cos_t = cs;
  const float* sin_t = cs + half;
  rope_table(cs, half, static_cast<float>(positions[t]), inv_freq, pairs, attn_scaling);
  // PDL: the table above needs only step metadata; qkv is the predecessor's output and the caches may
  // still be read by it.
  pdl_wait();
  pdl_trigger();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t slot = slots[t];
  const int64_t W = int64_t{Hq + 2 * Hk} * D;  // qkv row width
  const int h_begin = blockIdx.y * heads_per_block;
  const int h_end = min(Hq + 2 * Hk, h_begin + heads_per_block);
  // Element offsets of pair i's two members: (2i, 2i + 1) interleaved, (i, i + D/2) rotate_half.
  const int step = interleaved ? 2 : 1, second = interleaved ? 1 : half;
  for (int h = h_begin + warp; h < h_end; h += kWarps) {
    const bool is_q = h < Hq, is_k = !is_q && h < Hq + Hk;
    if (!is_q && slot < 0) continue;  // padding token: nothing to cache
    const int64_t src = t * W + int64_t{h} * D;
    const void* nw = is_q ? q_norm : is_k ? k_norm : nullptr;
    const int nw_dt = is_q ? qn_dt : kn_dt;
    // Norm weights are loaded with the row (independent loads in flight together), used after the reduction.
    float x1[kPairs], x2[kPairs], w1[kPairs], w2[kPairs];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int i = lane + 32 * k;
      x1[k] = x2[k] = w1[k] = w2[k] = 0.0f;
      if (i < half) {
        const int e = step * i;
        x1[k] = load_f32(qkv, qkv_dt, src + e);
        x2[k] = load_f32(qkv, qkv_dt, src + e + second);
        if (nw != nullptr) {
          w1[k] = load_f32(nw, nw_dt, e);
          w2[k] = load_f32(nw, nw_dt, e + second);
        }
        ss += x1[k] * x1[k] + x2[k] * x2[k];
      }
    }
    void* dst;
    int dst_dt;
    int64_t off;
    if (is_q) {
      dst = q_out, dst_dt = q_dt, off = (t * Hq + h) * D;
    } else if (is_k) {
      dst = k_cache, dst_dt = k_dt, off = (slot * Hk + (h - Hq)) * D;
    } else {
      dst = v_cache, dst_dt = v_dt, off = (slot * Hk + (h - Hq - Hk)) * D;
    }
    if (is_q || is_k) {
      if (nw != nullptr) {
        const float r = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
#pragma unroll
        for (int k = 0; k < kPairs; ++k) {
          const int i = lane + 32 * k;
          if (i < half) {
            x1[k] = w1[k] * (x1[k] * r);
            x2[k] = w2[k] * (x2[k] * r);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const int i = lane + 32 * k;
        if (i < half) {
          const float c = cos_t[i], sn = sin_t[i];
          const float a = x1[k], b = x2[k];
          x1[k] = a * c - b * sn;
          x2[k] = b * c + a * sn;
        }
      }
    }
    float* row_scale = is_q ? nullptr : is_k ? k_scale : v_scale;  // non-null: an fp8 cache row
    if (row_scale != nullptr) {
      float amax = 0.0f;
#pragma unroll
      for (int k = 0; k < kPairs; ++k)
        if (lane + 32 * k < half) amax = fmaxf(amax, fmaxf(fabsf(x1[k]), fabsf(x2[k])));
      const float sc = fp8_kv_row_scale(warp_max(amax));
      uint8_t* codes = static_cast<uint8_t*>(dst);
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        const int i = lane + 32 * k;
        if (i < half) {
          codes[off + step * i] = fp8_e4m3_code(x1[k] / sc);
          codes[off + step * i + second] = fp8_e4m3_code(x2[k] / sc);
        }
      }
      if (lane == 0) row_scale[off / D] = sc;
      continue;
    }
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int i = lane + 32 * k;
      if (i < half) {
        store_f32(dst, dst_dt, off + step * i, x1[k]);
        store_f32(dst, dst_dt, off + step * i + second, x2[k]);
      }
    }
  }
}


// All bf16; D = 8 * kLanesPerHead. q_norm / k_norm may be null (no norm). Rows are 16-byte aligned.
template <int kLanesPerHead>
__global__ void __launch_bounds__(kWarps * 32)
qkv_prologue_vec_kernel(uint4* __restrict__ q_out, const uint4* __restrict__ qkv, const uint4* __restrict__ q_norm,
                        const uint4* __restrict__ k_norm, float eps, const int32_t* __restrict__ positions,
                        const float* __restrict__ inv_freq, int pairs, bool interleaved, float attn_scaling,
                        uint4* __restrict__ k_cache, uint4* __restrict__ v_cache, const int32_t* __restrict__ slots,
                        int Hq, int Hk, int heads_per_block) {
  constexpr int kChunks = kLanesPerHead;           // 16-byte chunks per head row
  constexpr int kHalf = kLanesPerHead * 4;         // D / 2
  constexpr int kHeadsPerWarp = 32 / kLanesPerHead;
  __shared__ float cs[2 * kHalf];  // [D/2] cos, [D/2] sin
  const int64_t t = blockIdx.x;
  rope_table(cs, kHalf, static_cast<float>(positions[t]), inv_freq, pairs, attn_scaling);
  // PDL: the table needs only step metadata; qkv is the predecessor's output and the caches may still be
  // read by it.
  pdl_wait();
  pdl_trigger();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hl = lane % kLanesPerHead;            // lane within the head
  const int64_t slot = slots[t];
  const int total = Hq + 2 * Hk;
  const int h_begin = blockIdx.y * heads_per_block;
  const int h_end = min(total, h_begin + heads_per_block);
  // Every lane runs every iteration (the shuffles need the whole warp); inactive lanes store nothing.
  for (int h0 = h_begin + warp * kHeadsPerWarp; h0 < h_end; h0 += kWarps * kHeadsPerWarp) {
    const int h = h0 + lane / kLanesPerHead;
    const bool is_q = h < Hq, is_k = !is_q && h < Hq + Hk;
    const bool active = h < h_end && (is_q || slot >= 0);
    const uint4* nw = is_q ? q_norm : is_k ? k_norm : nullptr;
    uint4 raw = make_uint4(0, 0, 0, 0), wraw = raw;
    if (active) {
      raw = qkv[(t * total + h) * kChunks + hl];
      if (nw != nullptr) wraw = nw[hl];
    }
    const uint4 y = norm_rope_chunk<kLanesPerHead>(raw, wraw, nw != nullptr, eps, cs, hl, interleaved);
    if (active) {
      uint4* dst = is_q   ? q_out + (t * Hq + h) * kChunks
                   : is_k ? k_cache + (slot * Hk + (h - Hq)) * kChunks
                          : v_cache + (slot * Hk + (h - Hq - Hk)) * kChunks;
      dst[hl] = (is_q || is_k) ? y : raw;
    }
  }
}

}  // namespace

void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const ops::RopeParams& rope, const KvCacheTensor& k_cache,
                  const KvCacheTensor& v_cache, const AttentionMetadata& meta, ops::Stream s) {
  const int64_t T = q_out.dim(0), Hq = q_out.dim(1), D = q_out.dim(2);
  const int64_t Hk = k_cache.dim(2);
  if (T == 0) return;
  NANOVLLM_CHECK(D % 2 == 0 && D / 2 <= 32 * kMaxPairsPerLane, "qkv_prologue (cuda): head_dim ", D,
                 " must be even and at most ", 64 * kMaxPairsPerLane);
  const bool has_qn = q_norm.defined() && q_norm.numel() > 0 && q_norm.data() != nullptr;
  const bool has_kn = k_norm.defined() && k_norm.numel() > 0 && k_norm.data() != nullptr;
  const int total_heads = static_cast<int>(Hq + 2 * Hk);
  const ops::Stream st = s;
  const int32_t* pos = positions.data_as<const int32_t>();
  const float* inv_freq = rope.inv_freq.data_as<const float>();
  const int pairs = static_cast<int>(rope.inv_freq.numel());  // ops.cpp checked: D/2, or <= D/2 interleaved
  const int32_t* slots = meta.slot_mapping.data_as<const int32_t>();
  const int64_t lanes_per_head = D / 8;
  const bool vec = !k_cache.fp8() && D % 8 == 0 && lanes_per_head >= 2 && lanes_per_head <= 32 &&
                   (lanes_per_head & (lanes_per_head - 1)) == 0 && q_out.dtype() == DType::kBF16 &&
                   qkv.dtype() == DType::kBF16 && k_cache.dtype() == DType::kBF16 &&
                   v_cache.dtype() == DType::kBF16 && (!has_qn || q_norm.dtype() == DType::kBF16) &&
                   (!has_kn || k_norm.dtype() == DType::kBF16) && aligned16(q_out.data()) &&
                   aligned16(qkv.data()) && aligned16(k_cache.data()) && aligned16(v_cache.data()) &&
                   (!has_qn || aligned16(q_norm.data())) && (!has_kn || aligned16(k_norm.data()));
  if (vec) {
    // Small T: one pass of the block's warps over its heads; large T: all heads of the token.
    const int heads_per_pass = kWarps * static_cast<int>(32 / lanes_per_head);
    const int heads_per_block = T <= kSplitHeadsMaxTokens ? heads_per_pass : total_heads;
    const dim3 grid(static_cast<unsigned>(T), ceil_div_u(total_heads, heads_per_block));
    const auto kernel = lanes_per_head == 2    ? qkv_prologue_vec_kernel<2>
                        : lanes_per_head == 4  ? qkv_prologue_vec_kernel<4>
                        : lanes_per_head == 8  ? qkv_prologue_vec_kernel<8>
                        : lanes_per_head == 16 ? qkv_prologue_vec_kernel<16>
                                               : qkv_prologue_vec_kernel<32>;
    launch_pdl(kernel, grid, dim3(kWarps * 32), 0, st, q_out.data_as<uint4>(), qkv.data_as<const uint4>(),
               has_qn ? q_norm.data_as<const uint4>() : nullptr, has_kn ? k_norm.data_as<const uint4>() : nullptr,
               eps, pos, inv_freq, pairs, rope.interleaved, rope.attention_scaling, k_cache.data_as<uint4>(),
               v_cache.data_as<uint4>(), slots,
               static_cast<int>(Hq), static_cast<int>(Hk), heads_per_block);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = static_cast<size_t>(D) * sizeof(float);
  const int heads_per_block = T <= kSplitHeadsMaxTokens ? kWarps : total_heads;
  const dim3 grid(static_cast<unsigned>(T), ceil_div_u(total_heads, heads_per_block));
  const int lane_pairs = static_cast<int>((D / 2 + 31) / 32);
  const auto kernel = lane_pairs <= 1 ? qkv_prologue_kernel<1> : lane_pairs <= 2 ? qkv_prologue_kernel<2>
                      : lane_pairs <= 4 ? qkv_prologue_kernel<4> : qkv_prologue_kernel<kMaxPairsPerLane>;
  launch_pdl(kernel, grid, dim3(kWarps * 32), smem, st, q_out.data(), dt(q_out), qkv.data(), dt(qkv),
      has_qn ? q_norm.data() : nullptr, has_qn ? dt(q_norm) : 0,
      has_kn ? k_norm.data() : nullptr, has_kn ? dt(k_norm) : 0, eps, pos, inv_freq, pairs, rope.interleaved,
      rope.attention_scaling,
      k_cache.data(), dt(k_cache), v_cache.data(), dt(v_cache), k_cache.fp8() ? k_cache.scale.data_as<float>() : nullptr,
      v_cache.fp8() ? v_cache.scale.data_as<float>() : nullptr, slots, static_cast<int>(Hq), static_cast<int>(Hk),
      static_cast<int>(D), heads_per_block);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
