// The attention prologue's per-head math on the device, shared by qkv_prologue.cu and the decode
// attention with the prologue fused in (attention_decode.cu), so both round q and k identically:
// the RoPE cos/sin table, and one head row's optional RMSNorm + RoPE (rotate_half or GLM-4's interleaved
// partial form) in the vec layout
// (kLanes lanes per head, lane hl holding the 8 consecutive elements [8 hl, 8 hl + 8)).
#pragma once

#include <cstdint>

#include "nanovllm/kernels/cuda/common.cuh"

namespace nanovllm::cuda_ops {

// cos/sin of angle = pos * inv_freq[i] (fp32, accurate sincosf) times attn_scaling into shared memory:
// cs[0, half) cos, cs[half, 2 half) sin, for the `pairs` frequencies; entries [pairs, half) get cos 1, sin 0,
// so the elements of a partial (interleaved) RoPE past 2 * pairs pass through unchanged (x * 1 - y * 0 is x
// exactly). Block-strided: every thread of the block calls it.
__device__ __forceinline__ void rope_table(float* cs, int half, float pos, const float* __restrict__ inv_freq,
                                           int pairs, float attn_scaling) {
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn = 0.0f, cn = 1.0f;
    if (i < pairs) {
      sincosf(pos * inv_freq[i], &sn, &cn);
      cn *= attn_scaling;
      sn *= attn_scaling;
    }
    cs[i] = cn;
    cs[half + i] = sn;
  }
}

// Sum over the kLanes lanes of an aligned lane group (kLanes a power of two <= 32).
template <int kLanes>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One head row in the vec layout: raw = the lane's 8 bf16, wraw = the matching 8 norm weights (used when
// has_norm): RMSNorm over the head (w * (x * r), fp32), then RoPE with the table cs. rotate_half: D / 2 =
// 4 kLanes pairs, the partner of element i is the same register of lane hl ^ kLanes / 2. Interleaved
// (GLM-4): the pairs (2i, 2i + 1) lie within a lane's registers, at table index 4 hl + i / 2. Every lane of
// the warp must call it (shuffles); lanes of an unused group may pass zeros; `interleaved` is warp-uniform.
// Returns the rounded values.
template <int kLanes>
__device__ __forceinline__ uint4 norm_rope_chunk(uint4 raw, uint4 wraw, bool has_norm, float eps,
                                                 const float* cs, int hl, bool interleaved) {
  constexpr int kHalf = kLanes * 4;  // D / 2
  float x[8];
  bf16x8_to_f32(raw, x);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) ss += x[i] * x[i];
  ss = group_sum<kLanes>(ss);
  if (has_norm) {
    const float r = rsqrtf(ss / static_cast<float>(8 * kLanes) + eps);
    float w[8];
    bf16x8_to_f32(wraw, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = w[i] * (x[i] * r);
  }
  float y[8];
  if (interleaved) {
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const int ci = 4 * hl + i / 2;
      const float c = cs[ci], sn = cs[kHalf + ci];
      // CPU: a' = a cos - b sin, b' = b cos + a sin for the pair (a, b) = (x[i], x[i + 1]).
      y[i] = x[i] * c - x[i + 1] * sn;
      y[i + 1] = x[i + 1] * c + x[i] * sn;
    }
    return f32_to_bf16x8(y);
  }
  const bool second_half = hl >= kLanes / 2;
  const int ci = (hl % (kLanes / 2)) * 8;  // cos/sin index of this lane's first element
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float partner = __shfl_xor_sync(0xffffffffu, x[i], kLanes / 2);
    const float c = cs[ci + i], sn = cs[kHalf + ci + i];
    // CPU: x1' = x1 cos - x2 sin (first half), x2' = x2 cos + x1 sin (second half).
    y[i] = second_half ? x[i] * c + partner * sn : x[i] * c - partner * sn;
  }
  return f32_to_bf16x8(y);
}

}  // namespace nanovllm::cuda_ops
