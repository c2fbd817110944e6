// Dual Chunk Attention's attention prologue (kernels/dual_chunk_ops.h): qkv_prologue.cu's vec kernel with three
// query rotations. Per block: one token and a group of its heads; the block first puts three cos/sin tables in
// shared memory (the intra-chunk rotation, which the key shares, the successive and the inter one), each times
// the token's length factor (the tables' multiplier, as YaRN's attention factor), then its warps take the heads:
// a query head is normalised and rotated three times into q_out[0..2], a key head rotated with the intra table
// into the cache, a value head copied. Math as kernels/cpu/dual_chunk_qkv_prologue.cpp (fp32, one rounding).
// All bf16, head_dim 8 x {2, 4, 8, 16, 32} with 16-byte aligned rows (the DCA models: Qwen2 / Qwen3, head_dim 128).
#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_dual_chunk_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/qkv_rope.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kSplitHeadsMaxTokens = 1024;  // as qkv_prologue.cu: small T spreads a token's heads over blocks

struct DcaRope {
  int chunk_len, chunk_size;
  int original_max_position_embeddings;  // > 0: scale_lens[t] gives the length factor
  const int32_t* scale_lens;             // [T]
};

template <int kLanesPerHead>
__global__ void __launch_bounds__(kWarps * 32)
dca_qkv_prologue_kernel(uint4* __restrict__ q_out, const uint4* __restrict__ qkv, const uint4* __restrict__ q_norm,
                        const uint4* __restrict__ k_norm, float eps, const int32_t* __restrict__ positions,
                        const float* __restrict__ inv_freq, int pairs, float attn_scaling, DcaRope dca,
                        uint4* __restrict__ k_cache, uint4* __restrict__ v_cache, const int32_t* __restrict__ slots,
                        int T, int Hq, int Hk, int heads_per_block) {
  constexpr int kChunks = kLanesPerHead;    // 16-byte chunks per head row
  constexpr int kHalf = kLanesPerHead * 4;  // D / 2
  constexpr int kHeadsPerWarp = 32 / kLanesPerHead;
  __shared__ float cs[3][2 * kHalf];  // [rotation][D/2 cos, D/2 sin]: intra (= key), successive, inter
  const int64_t t = blockIdx.x;
  const int pos = positions[t];
  float mult = attn_scaling;
  if (dca.original_max_position_embeddings > 0) {  // vLLM: (0.1 * log(n / original) + 1).clip(min=1)
    const double f = 0.1 * log(static_cast<double>(dca.scale_lens[t]) / dca.original_max_position_embeddings) + 1.0;
    mult *= static_cast<float>(fmax(f, 1.0));
  }
  const int intra = pos % dca.chunk_len;
  const int succ = min(intra + dca.chunk_len, dca.chunk_size);
  const int inter = min(2 * dca.chunk_len - 1, dca.chunk_size);
  rope_table(cs[0], kHalf, static_cast<float>(intra), inv_freq, pairs, mult);
  rope_table(cs[1], kHalf, static_cast<float>(succ), inv_freq, pairs, mult);
  rope_table(cs[2], kHalf, static_cast<float>(inter), inv_freq, pairs, mult);
  // PDL: the tables need only step metadata; qkv is the predecessor's output and the caches may still be read
  // by it.
  pdl_wait();
  pdl_trigger();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hl = lane % kLanesPerHead;  // lane within the head
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
    // Every lane runs the three rotations (norm_rope_chunk shuffles over the whole warp, whose heads may mix q
    // and k); a query head stores all three, a key head the intra one, a value head its raw row.
    const uint4 y0 = norm_rope_chunk<kLanesPerHead>(raw, wraw, nw != nullptr, eps, cs[0], hl, false);
    const uint4 y1 = norm_rope_chunk<kLanesPerHead>(raw, wraw, nw != nullptr, eps, cs[1], hl, false);
    const uint4 y2 = norm_rope_chunk<kLanesPerHead>(raw, wraw, nw != nullptr, eps, cs[2], hl, false);
    if (!active) continue;
    if (is_q) {
      const int64_t row = (t * Hq + h) * kChunks + hl, rotation = int64_t{T} * Hq * kChunks;
      q_out[row] = y0;
      q_out[rotation + row] = y1;
      q_out[2 * rotation + row] = y2;
    } else {
      uint4* dst = is_k ? k_cache + (slot * Hk + (h - Hq)) * kChunks : v_cache + (slot * Hk + (h - Hq - Hk)) * kChunks;
      dst[hl] = is_k ? y0 : raw;
    }
  }
}

}  // namespace

void dual_chunk_qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                             TensorView positions, const ops::RopeParams& rope, const ops::DualChunkParams& dca,
                             TensorView k_cache, TensorView v_cache, const AttentionMetadata& meta, ops::Stream s) {
  const int64_t T = q_out.dim(1), Hq = q_out.dim(2), D = q_out.dim(3);
  const int64_t Hk = k_cache.dim(2);
  if (T == 0) return;
  const bool has_qn = q_norm.defined() && q_norm.numel() > 0 && q_norm.data() != nullptr;
  const bool has_kn = k_norm.defined() && k_norm.numel() > 0 && k_norm.data() != nullptr;
  const int64_t lanes_per_head = D / 8;
  const bool vec = D % 8 == 0 && lanes_per_head >= 2 && lanes_per_head <= 32 &&
                   (lanes_per_head & (lanes_per_head - 1)) == 0 && q_out.dtype() == DType::kBF16 &&
                   qkv.dtype() == DType::kBF16 && k_cache.dtype() == DType::kBF16 &&
                   v_cache.dtype() == DType::kBF16 && (!has_qn || q_norm.dtype() == DType::kBF16) &&
                   (!has_kn || k_norm.dtype() == DType::kBF16) && aligned16(q_out.data()) &&
                   aligned16(qkv.data()) && aligned16(k_cache.data()) && aligned16(v_cache.data()) &&
                   (!has_qn || aligned16(q_norm.data())) && (!has_kn || aligned16(k_norm.data()));
  NANOVLLM_CHECK(vec, "dual_chunk_qkv_prologue (cuda): bf16 tensors with 16-byte aligned rows and head_dim 16, 32, "
                 "64, 128 or 256 (got head_dim ", D, ")");
  const int total_heads = static_cast<int>(Hq + 2 * Hk);
  const int heads_per_pass = kWarps * static_cast<int>(32 / lanes_per_head);
  const int heads_per_block = T <= kSplitHeadsMaxTokens ? heads_per_pass : total_heads;
  const dim3 grid(static_cast<unsigned>(T), ceil_div_u(total_heads, heads_per_block));
  const DcaRope d{static_cast<int>(dca.chunk_len), static_cast<int>(dca.chunk_size),
                  static_cast<int>(dca.original_max_position_embeddings),
                  dca.scales() ? meta.dca_scale_lens.data_as<const int32_t>() : nullptr};
  const auto kernel = lanes_per_head == 2    ? dca_qkv_prologue_kernel<2>
                      : lanes_per_head == 4  ? dca_qkv_prologue_kernel<4>
                      : lanes_per_head == 8  ? dca_qkv_prologue_kernel<8>
                      : lanes_per_head == 16 ? dca_qkv_prologue_kernel<16>
                                             : dca_qkv_prologue_kernel<32>;
  launch_pdl(kernel, grid, dim3(kWarps * 32), 0, s, q_out.data_as<uint4>(), qkv.data_as<const uint4>(),
             has_qn ? q_norm.data_as<const uint4>() : nullptr, has_kn ? k_norm.data_as<const uint4>() : nullptr, eps,
             positions.data_as<const int32_t>(), rope.inv_freq.data_as<const float>(),
             static_cast<int>(rope.inv_freq.numel()), rope.attention_scaling, d, k_cache.data_as<uint4>(),
             v_cache.data_as<uint4>(), meta.slot_mapping.data_as<const int32_t>(), static_cast<int>(T),
             static_cast<int>(Hq), static_cast<int>(Hk), heads_per_block);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
