// Online softmax (FlashAttention-2 style, base 2) on scores held in the mma.sync accumulator layout
// (mma_utils.cuh): this thread holds rows gq and gq + 8 (h = 0, 1) of its warp's 16 rows; a row's scores
// are spread over the 4 lanes of a quad. Shared by the tensor-core prefill (mma.sync and wgmma) and decode
// kernels. S is float[NT][4] or float[4 NT] (see frag()).
#pragma once

#include "nanovllm/kernels/cuda/mma_utils.cuh"

namespace nanovllm::cuda_ops::attn {

// Causal / range mask: the score of key key0 + 8 n + 2 tq + c (element (n, e), c = e & 1) becomes -inf
// past its row's last visible key lim[h].
template <class S>
__device__ __forceinline__ void mask_scores(S& s, int key0, int tq, const int (&lim)[2]) {
#pragma unroll
  for (int n = 0; n < FragTiles<S>::kN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int kj = key0 + n * 8 + 2 * tq + (e & 1);
      if (kj > lim[e >> 1]) frag(s, n, e) = -INFINITY;
    }
  }
}

// Mask by key position (keys of a tile not contiguous: the block-sparse key stream): key k = 8 n + 2 tq + c
// of the tile sits at position kpos[k] (shared memory, 8-byte aligned); its score becomes -inf past its
// row's last visible position lim[h].
template <class S>
__device__ __forceinline__ void mask_scores_at(S& s, const int* kpos, int tq, const int (&lim)[2]) {
#pragma unroll
  for (int n = 0; n < FragTiles<S>::kN; ++n) {
    const int2 kp = *reinterpret_cast<const int2*>(kpos + n * 8 + 2 * tq);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if ((e & 1 ? kp.y : kp.x) > lim[e >> 1]) frag(s, n, e) = -INFINITY;
  }
}

// One tile's step. s: raw scores (masked ones -inf); sl2 = softmax scale * log2 e, applied here (one
// FFMA + MUFU.EX2 per score). m: running row maxima (raw scores); l: this lane's partial row sums.
// Returns alpha (the factor the output accumulators of row h must be scaled by before adding P V) and
// P (f32) in the S accumulator layout.
template <class S>
__device__ __forceinline__ void online_softmax_p(const S& s, float sl2, float (&m)[2], float (&l)[2],
                                                 float (&alpha)[2], S& p) {
  constexpr int kNT = FragTiles<S>::kN;
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    mx[0] = fmaxf(mx[0], fmaxf(frag(s, n, 0), frag(s, n, 1)));
    mx[1] = fmaxf(mx[1], fmaxf(frag(s, n, 2), frag(s, n, 3)));
  }
  float mref[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = quad_max(mx[h]);
    mref[h] = mx[h] == -INFINITY ? 0.0f : mx[h] * sl2;  // a fully masked row so far: keep exp2 finite
    alpha[h] = ex2(m[h] * sl2 - mref[h]);
    m[h] = mx[h];
  }
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    const float p0 = ex2(fmaf(frag(s, n, 0), sl2, -mref[0])), p1 = ex2(fmaf(frag(s, n, 1), sl2, -mref[0]));
    const float p2 = ex2(fmaf(frag(s, n, 2), sl2, -mref[1])), p3 = ex2(fmaf(frag(s, n, 3), sl2, -mref[1]));
    rs[0] += p0 + p1;
    rs[1] += p2 + p3;
    frag(p, n, 0) = p0;
    frag(p, n, 1) = p1;
    frag(p, n, 2) = p2;
    frag(p, n, 3) = p3;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + rs[h];
}

// online_softmax_p with P as bf16 A fragments: the S accumulator layout is the A fragment layout, n-tiles 2k and
// 2k + 1 forming k-step k (16 keys).
template <class S, int KS>
__device__ __forceinline__ void online_softmax(const S& s, float sl2, float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], uint32_t (&pa)[KS][4]) {
  constexpr int kNT = FragTiles<S>::kN;
  static_assert(kNT == 2 * KS, "P fragments: two n-tiles per k-step");
  S p;
  online_softmax_p(s, sl2, m, l, alpha, p);
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    pa[n >> 1][(n & 1) * 2 + 0] = pack_bf16(frag(p, n, 0), frag(p, n, 1));
    pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16(frag(p, n, 2), frag(p, n, 3));
  }
}

// o (accumulators of rows gq, gq + 8) *= alpha.
template <class O>
__device__ __forceinline__ void scale_rows(O& o, const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < FragTiles<O>::kN; ++n) {
    frag(o, n, 0) *= alpha[0];
    frag(o, n, 1) *= alpha[0];
    frag(o, n, 2) *= alpha[1];
    frag(o, n, 3) *= alpha[1];
  }
}

// Final normalisation factors of rows gq, gq + 8: 1 / (row sum over the quad), 0 for an empty row.
__device__ __forceinline__ void inv_row_sums(const float (&l)[2], float (&inv)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float t = quad_sum(l[h]);
    inv[h] = t > 0.0f ? 1.0f / t : 0.0f;
  }
}

}  // namespace nanovllm::cuda_ops::attn
