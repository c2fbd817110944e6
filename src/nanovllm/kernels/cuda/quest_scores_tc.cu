// Quest page scores as a small matrix product. A page's bound for query head n is
//   sum_i q_i * (q_i >= 0 ? max_i : min_i) = max(q, 0) . max + min(q, 0) . min,
// so the scores of 16 pages for the GQA group's query heads are one [16, 2D] x [2D, 8] product: the pages' [max | min]
// rows as mma.sync m16n8k16's A operand, straight from global memory with gemv.cu's operand layout (each lane's
// 16-byte load holds 8 consecutive dims of one row; the k order inside a step is permuted the same way for A and
// B), and [max(q, 0) | min(q, 0)] of up to 8 query heads as B, held in registers for the whole CTA. A page's score
// is the max over the group's heads. The products are exact (bf16 x bf16 in fp32), the sums fp32 in another
// order than the CUDA-core kernel's. The CUDA-core kernel (sparse_decode.cu) issued ~11M warp instructions for one
// 128K sequence's 131K (page, head) pairs and reached ~2 TB/s; this one issues two mma per 32 dims of 16 pages.
#include "nanovllm/kernels/cuda/quest_scores_tc.h"

#include <cuda_bf16.h>

#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kWarps = 8;
constexpr int kPagesPerCta = 256;  // a 128K context of 16-token pages: 32 CTAs per (sequence, KV head)
constexpr int kMaxGroup = 8;       // query heads per KV head: B's 8 columns

// bf16 x 8 with the negative elements zeroed (kKeepNegative: the others): max(q, 0) / min(q, 0), exact.
template <bool kKeepNegative>
__device__ __forceinline__ uint4 keep_sign(uint4 v) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t neg = ((w[i] >> 15) & 1u) * 0x0000ffffu | ((w[i] >> 31) & 1u) * 0xffff0000u;  // sign masks
    w[i] &= kKeepNegative ? neg : ~neg;
  }
  return v;
}

// Grid (S x Hk, page chunks of kPagesPerCta), kWarps warps; warp w takes pages [base, base + 16) for base =
// chunk start + 16 w, + 16 kWarps, ... Lane (g = lane / 4, c = lane % 4) loads pages base + g and base + g + 8.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    quest_scores_tc_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ q,
                           const __nv_bfloat16* __restrict__ k_min, const __nv_bfloat16* __restrict__ k_max,
                           const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens, int hq,
                           int hk, int max_pages, int max_blocks, int block_size) {
  constexpr int kSteps = 2 * D / 32;  // 32 dims of [max | min] per step: max's steps, then min's
  const int item = blockIdx.x, s = item / hk, h = item % hk, group = hq / hk;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, c = lane & 3;
  pdl_wait();  // q and the metadata come from the preceding kernels
  pdl_trigger();
  // B: column g = query head h * group + g (zeros past the group), dims 32 j + 8 c .. + 8 of each step.
  uint4 b[kSteps];
  const uint4* qrow = reinterpret_cast<const uint4*>(q + (int64_t{s} * hq + int64_t{h} * group + min(g, group - 1)) * D);
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const uint4 v = g < group ? qrow[(j % (D / 32)) * 4 + c] : make_uint4(0, 0, 0, 0);
    b[j] = j < D / 32 ? keep_sign<false>(v) : keep_sign<true>(v);
  }
  const int ctx = context_lens[s];
  const int pages = (ctx + block_size - 1) / block_size;
  const int p_end = min(max_pages, (static_cast<int>(blockIdx.y) + 1) * kPagesPerCta);
  const int p_live = min(pages, p_end);
  const int32_t* table = block_tables + int64_t{s} * max_blocks;
  for (int base = static_cast<int>(blockIdx.y) * kPagesPerCta + 16 * warp; base < p_end; base += 16 * kWarps) {
    const int p0 = base + g, p1 = base + g + 8;
    // Rows past the context read row h of block 0 (in bounds; their scores are not stored).
    const int64_t m0 = (int64_t{p0 < p_live ? table[p0] : 0} * hk + h) * D + 8 * c;
    const int64_t m1 = (int64_t{p1 < p_live ? table[p1] : 0} * hk + h) * D + 8 * c;
    uint4 a0[kSteps], a1[kSteps];
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const __nv_bfloat16* src = j < D / 32 ? k_max : k_min;
      const int64_t dim = (j % (D / 32)) * 32;
      a0[j] = gemv_detail::ld_weight(reinterpret_cast<const uint4*>(src + m0 + dim));
      a1[j] = gemv_detail::ld_weight(reinterpret_cast<const uint4*>(src + m1 + dim));
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      gemv_detail::mma_bf16(acc, a0[j].x, a1[j].x, a0[j].y, a1[j].y, b[j].x, b[j].y);
      gemv_detail::mma_bf16(acc, a0[j].z, a1[j].z, a0[j].w, a1[j].w, b[j].z, b[j].w);
    }
    // acc: pages g (0, 1) and g + 8 (2, 3) for query heads 2c and 2c + 1; the max over the group's heads.
    const bool h0 = 2 * c < group, h1 = 2 * c + 1 < group;
    float best0 = fmaxf(h0 ? acc[0] : -INFINITY, h1 ? acc[1] : -INFINITY);
    float best1 = fmaxf(h0 ? acc[2] : -INFINITY, h1 ? acc[3] : -INFINITY);
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      best0 = fmaxf(best0, __shfl_xor_sync(0xffffffffu, best0, o));
      best1 = fmaxf(best1, __shfl_xor_sync(0xffffffffu, best1, o));
    }
    if (c == 0) {
      float* out = scores + int64_t{item} * max_pages;
      if (p0 < p_end) out[p0] = p0 < pages ? best0 : -INFINITY;
      if (p1 < p_end) out[p1] = p1 < pages ? best1 : -INFINITY;
    }
  }
}

}  // namespace

bool quest_scores_tensor_cores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max,
                               TensorView block_tables, TensorView context_lens, int64_t block_size, ops::Stream s) {
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hk = k_min.dim(1), MP = scores.dim(2);
  if (q.ndim() != 3 || Hq % Hk != 0 || Hq / Hk > kMaxGroup || (D != 64 && D != 128 && D != 256)) return false;
  if (!aligned16(q.data()) || !aligned16(k_min.data()) || !aligned16(k_max.data())) return false;
  if (S == 0 || MP == 0) return true;
  const dim3 grid(static_cast<unsigned>(S * Hk), static_cast<unsigned>((MP + kPagesPerCta - 1) / kPagesPerCta));
  const auto launch = [&](auto kernel) {
    launch_pdl(kernel, grid, dim3(kWarps * 32), 0, s, scores.data_as<float>(), q.data_as<const __nv_bfloat16>(),
               k_min.data_as<const __nv_bfloat16>(), k_max.data_as<const __nv_bfloat16>(),
               block_tables.data_as<const int32_t>(), context_lens.data_as<const int32_t>(), static_cast<int>(Hq),
               static_cast<int>(Hk), static_cast<int>(MP), static_cast<int>(block_tables.dim(1)),
               static_cast<int>(block_size));
  };
  if (D == 64) launch(quest_scores_tc_kernel<64>);
  else if (D == 128) launch(quest_scores_tc_kernel<128>);
  else launch(quest_scores_tc_kernel<256>);
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace nanovllm::cuda_ops
