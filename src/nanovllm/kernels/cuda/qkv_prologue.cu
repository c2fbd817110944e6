// Fused attention prologue. Grid (token, head group): each block takes one token and up to
// `heads_per_block` of its Hq + 2 Hk heads (kWarps at small T, so a decode step spreads over
// (Hq + 2 Hk) / kWarps blocks instead of one; all heads of the token at large T, where the grid is
// already wide and the per-block cos/sin table is then computed once per token):
//   1. cos/sin of angle = float(pos) * inv_freq[i] (fp32, accurate sincosf), times attention_scaling,
//      into shared memory (per block: the same values in every block of the token);
//   2. one warp per head (q heads, then k heads, then v heads): lane handles the RoPE pairs
//      (i, i + D/2) for i = lane, lane + 32, ... so loads are coalesced; optional per-head RMSNorm over D
//      in fp32 (warp reduction); rotate_half RoPE in fp32; one rounding to the output dtype;
//   3. q -> q_out[t, h, :], k/v -> caches at slot_mapping[t] (slot -1: not stored).
// Math order matches kernels/cpu/qkv_prologue.cpp.
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kMaxPairsPerLane = 8;  // D <= 512
constexpr int kWarps = 4;
// Up to this many tokens a block takes kWarps heads (one each); beyond, a block takes all of a token's heads.
constexpr int64_t kSplitHeadsMaxTokens = 1024;

// kPairs: RoPE pairs per lane, ceil(D / 64) rounded up to a power of two (register arrays sized to D).
template <int kPairs>
__global__ void __launch_bounds__(kWarps * 32, 1)
qkv_prologue_kernel(void* q_out, int q_dt, const void* qkv, int qkv_dt, const void* q_norm, int qn_dt,
                    const void* k_norm, int kn_dt, float eps, const int32_t* __restrict__ positions,
                    const float* __restrict__ inv_freq, float attn_scaling, void* k_cache, int k_dt,
                    void* v_cache, int v_dt, const int32_t* __restrict__ slots, int Hq, int Hk, int D,
                    int heads_per_block) {
  extern __shared__ float cs[];  // [D/2] cos, [D/2] sin
  const int half = D / 2;
  const int64_t t = blockIdx.x;
  float* cos_t = cs;
  float* sin_t = cs + half;
  const float p = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cn;
    sincosf(p * inv_freq[i], &sn, &cn);
    cos_t[i] = cn * attn_scaling;
    sin_t[i] = sn * attn_scaling;
  }
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
        x1[k] = load_f32(qkv, qkv_dt, src + i);
        x2[k] = load_f32(qkv, qkv_dt, src + i + half);
        if (nw != nullptr) {
          w1[k] = load_f32(nw, nw_dt, i);
          w2[k] = load_f32(nw, nw_dt, i + half);
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
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int i = lane + 32 * k;
      if (i < half) {
        store_f32(dst, dst_dt, off + i, x1[k]);
        store_f32(dst, dst_dt, off + i + half, x2[k]);
      }
    }
  }
}

}  // namespace

void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const ops::RopeParams& rope, TensorView k_cache, TensorView v_cache,
                  const AttentionMetadata& meta, ops::Stream s) {
  const int64_t T = q_out.dim(0), Hq = q_out.dim(1), D = q_out.dim(2);
  const int64_t Hk = k_cache.dim(2);
  if (T == 0) return;
  NANOVLLM_CHECK(D % 2 == 0 && D / 2 <= 32 * kMaxPairsPerLane, "qkv_prologue (cuda): head_dim ", D,
                 " must be even and at most ", 64 * kMaxPairsPerLane);
  const bool has_qn = q_norm.defined() && q_norm.numel() > 0 && q_norm.data() != nullptr;
  const bool has_kn = k_norm.defined() && k_norm.numel() > 0 && k_norm.data() != nullptr;
  const size_t smem = static_cast<size_t>(D) * sizeof(float);
  const int total_heads = static_cast<int>(Hq + 2 * Hk);
  const int heads_per_block = T <= kSplitHeadsMaxTokens ? kWarps : total_heads;
  const dim3 grid(static_cast<unsigned>(T), ceil_div_u(total_heads, heads_per_block));
  const int pairs = static_cast<int>((D / 2 + 31) / 32);
  const auto kernel = pairs <= 1 ? qkv_prologue_kernel<1> : pairs <= 2 ? qkv_prologue_kernel<2>
                      : pairs <= 4 ? qkv_prologue_kernel<4> : qkv_prologue_kernel<kMaxPairsPerLane>;
  launch_pdl(kernel, grid, dim3(kWarps * 32), smem, stream_of(s), q_out.data(), dt(q_out), qkv.data(), dt(qkv),
      has_qn ? q_norm.data() : nullptr, has_qn ? dt(q_norm) : 0,
      has_kn ? k_norm.data() : nullptr, has_kn ? dt(k_norm) : 0, eps, positions.data_as<const int32_t>(),
      rope.inv_freq.data_as<const float>(), rope.attention_scaling, k_cache.data(), dt(k_cache), v_cache.data(),
      dt(v_cache), meta.slot_mapping.data_as<const int32_t>(), static_cast<int>(Hq), static_cast<int>(Hk),
      static_cast<int>(D), heads_per_block);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
