// Building blocks of the paged-attention kernels (SIMT, fp32 math on bf16 K/V):
// - cp.async 16-byte copies of K/V tiles (32 keys x D) from the paged cache into shared memory,
//   gathered through the block table; keys past the end are zero-filled;
// - attend_tile: one warp, IT query "items" (query rows x heads of one GQA group) against one tile with
//   online softmax (base-2, q pre-scaled by scale * log2 e). Lane j scores key j (K row from shared
//   memory, each K chunk reused across the IT items); probabilities go through a per-warp shared buffer
//   and lane l accumulates output dims [l * D/32, (l+1) * D/32) for every item in registers.
#pragma once

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/mma_utils.cuh"

namespace nanovllm::cuda_ops::attn {

constexpr int kTileKeys = 32;  // keys per tile = lanes per warp
constexpr int kWarps = 4;

template <int D> struct Dims {
  static constexpr int kRowPad = D + 8;              // bf16 per smem K/V row (+16 B: conflict-free rows)
  static constexpr int kTileElems = kTileKeys * kRowPad;  // bf16 per K (or V) tile
  static constexpr int kChunks = D / 8;              // 16-byte chunks per row
  static constexpr int kVpl = D / 32;                // output dims per lane
};

struct Params {
  const __nv_bfloat16* q;        // [T, Hq, D]
  __nv_bfloat16* out;            // [T, Hq, D]
  const __nv_bfloat16* k_cache;  // [NB, BS, Hk, D] (an fp8 cache: its e4m3 codes, bytes)
  const __nv_bfloat16* v_cache;  // [NB, BS, Hk, D]
  // An fp8 cache (kv_fp8.cuh): the rows' scales [NB, BS, Hk] f32; null: bf16. Every decode and prefill kernel reads
  // it, not the fused decode prologue: the tensor-core decode on the exact codes (f16 MMAs, the scales applied to the
  // scores and to P in f32), the prefill and SIMT kernels on K / V tiles dequantized to bf16(code x scale).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* cu;             // [S + 1]
  const int32_t* ctx;            // [S]
  const int32_t* bt;             // [S, max_blocks]
  int64_t max_blocks;
  int block_size;
  int num_seqs;
  int hq, hk, g;                 // g = Hq / Hk
  float scale_log2;              // softmax scale * log2(e)
  // decode split-KV partials (num_splits > 1): [S, Hq, splits, D] and [S, Hq, splits] (log2 domain)
  // (num_splits: the most splits per sequence; the tensor-core decode kernel picks each sequence's own
  // count on the device, see attention_decode.cu)
  float* part_o;
  float* part_lse;
  int num_splits;
  // tensor-core decode only: [S, Hk * head chunks] arrival counters of the fused split combine (zero
  // between launches: the last CTA of a group resets its counter), and the fewest keys per split.
  int* split_counters;
  int min_split_keys;
  // Tensor-core decode with the attention prologue fused in (launch_decode_tc's `prologue`): q is made
  // from qkv [T, (Hq + 2 Hk) D] (q_norm / k_norm [D] or null, RoPE at positions[t] with inv_freq
  // [rope_pairs] and rope_scaling as ops::RopeParams), and the token's K / V go to the caches at slots[t]
  // (-1: not cached).
  const __nv_bfloat16* qkv = nullptr;
  const __nv_bfloat16* q_norm = nullptr;
  const __nv_bfloat16* k_norm = nullptr;
  float eps = 0.0f;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;  // [rope_pairs]
  int rope_pairs = 0;               // D / 2, or fewer for GLM-4's interleaved partial RoPE
  bool rope_interleaved = false;
  float rope_scaling = 1.0f;
  const int32_t* slots = nullptr;
  // Dual Chunk Attention (the kDca kernels, kernels/dual_chunk_ops.h): q holds the intra-chunk rotation of
  // the queries, q_succ and q_inter ([T, Hq, D] each) the successive- and inter-chunk ones; keys are in chunks
  // of dca_chunk_len positions (a multiple of every key tile: 128). 0: plain attention.
  const __nv_bfloat16* q_succ = nullptr;
  const __nv_bfloat16* q_inter = nullptr;
  int dca_chunk_len = 0;
};

// The kernels' view of one attention call (paged_attention.cu; no split workspace yet). Throws unless
// q and out are BF16, the caches BF16 or fp8 (with scales), and Hq is a multiple of Hk.
Params attention_params(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                        const AttentionMetadata& meta, float scale);

// Paged KV cache: the block table of sequence `seq` ([max_blocks] cache block ids).
__device__ __forceinline__ const int32_t* block_table(const Params& p, int seq) {
  return p.bt + int64_t{seq} * p.max_blocks;
}
// Paged KV cache: cache slot (row of [NB * BS]) of key j of a sequence with block table `bt`. I: the
// integer type of the product (int64_t where slot * Hk * D is formed in 64 bits anyway).
template <class I = int>
__device__ __forceinline__ I paged_slot(const int32_t* bt, int j, int block_size) {
  return I{bt[j / block_size]} * block_size + j % block_size;
}

// Dual Chunk Attention: the query rotation a query at position `pos` uses for the keys of key chunk
// `key_chunk` (keys [key_chunk L, (key_chunk + 1) L)): 0 intra (its own chunk, or later: masked anyway),
// 1 successive (the previous chunk), 2 inter (earlier chunks).
__device__ __forceinline__ int dca_region(int pos, int key_chunk, int chunk_len) {
  const int c = pos / chunk_len;
  return key_chunk >= c ? 0 : key_chunk == c - 1 ? 1 : 2;
}
// The [T, Hq, D] query rotation `region` (dca_region) of a Dual Chunk Attention call.
__device__ __forceinline__ const __nv_bfloat16* dca_queries(const Params& p, int region) {
  return region == 0 ? p.q : region == 1 ? p.q_succ : p.q_inter;
}

// 8 query values -> shared fp32 (16-byte aligned dst), pre-scaled by `scale` (softmax scale * log2 e).
__device__ __forceinline__ void store_scaled_q8(float* dst, const float (&f)[8], float scale) {
  float4* d = reinterpret_cast<float4*>(dst);
  d[0] = make_float4(f[0] * scale, f[1] * scale, f[2] * scale, f[3] * scale);
  d[1] = make_float4(f[4] * scale, f[5] * scale, f[6] * scale, f[7] * scale);
}

// Threads [tid, tid + nthr, ...) copy keys [key0, key0 + 32) of seq `seq` (KV head kvh) into ks/vs;
// keys >= key_end become zeros (so masked keys never feed NaN/Inf into p * V). An fp8 cache: plain loads of 8
// codes, stored as the bf16 of code x scale (no cp.async: the values are transformed on the way).
template <int D>
__device__ __forceinline__ void load_tile(const Params& p, int seq, int kvh, int key0, int key_end,
                                          __nv_bfloat16* ks, __nv_bfloat16* vs, int tid, int nthr) {
  using Dm = Dims<D>;
  const int32_t* bt = block_table(p, seq);
  for (int c = tid; c < kTileKeys * Dm::kChunks; c += nthr) {
    const int r = c / Dm::kChunks, cc = c % Dm::kChunks;
    const int j = key0 + r;
    __nv_bfloat16* dk = ks + r * Dm::kRowPad + cc * 8;
    __nv_bfloat16* dv = vs + r * Dm::kRowPad + cc * 8;
    if (j < key_end) {
      const int64_t slot = paged_slot<int64_t>(bt, j, p.block_size);
      const int64_t row = slot * p.hk + kvh, off = row * D + cc * 8;
      if (p.k_scale != nullptr) {
        const auto* kc = reinterpret_cast<const uint8_t*>(p.k_cache);
        const auto* vc = reinterpret_cast<const uint8_t*>(p.v_cache);
        *reinterpret_cast<uint4*>(dk) = fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(kc + off), p.k_scale[row]);
        *reinterpret_cast<uint4*>(dv) = fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(vc + off), p.v_scale[row]);
      } else {
        cp_async16(dk, p.k_cache + off);
        cp_async16(dv, p.v_cache + off);
      }
    } else {
      *reinterpret_cast<uint4*>(dk) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dv) = make_uint4(0, 0, 0, 0);
    }
  }
}

// One tile for one warp. qrow(it): item it's [D] fp32 pre-scaled query (shared; Dual Chunk Attention picks
// each item's rotation per tile); lim[it]: last key index item it may see (causal / range end); pw: [IT, 32]
// fp32 per-warp shared scratch. m, l (per-lane partial sums), acc: running softmax state.
template <int D, int IT, class QRow>
__device__ __forceinline__ void attend_tile_rows(QRow qrow, const __nv_bfloat16* ks, const __nv_bfloat16* vs,
                                                 float* pw, int key0, const int (&lim)[IT], float (&m)[IT],
                                                 float (&l)[IT], float (&acc)[IT][Dims<D>::kVpl], int lane) {
  using Dm = Dims<D>;
  float s[IT];
#pragma unroll
  for (int it = 0; it < IT; ++it) s[it] = 0.0f;
  const __nv_bfloat16* krow = ks + lane * Dm::kRowPad;
#pragma unroll 4
  for (int dc = 0; dc < Dm::kChunks; ++dc) {
    float kf[8];
    bf16x8_to_f32(*reinterpret_cast<const uint4*>(krow + dc * 8), kf);
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const float4 a = *reinterpret_cast<const float4*>(qrow(it) + dc * 8);
      const float4 b = *reinterpret_cast<const float4*>(qrow(it) + dc * 8 + 4);
      s[it] += a.x * kf[0] + a.y * kf[1] + a.z * kf[2] + a.w * kf[3] + b.x * kf[4] + b.y * kf[5] +
               b.z * kf[6] + b.w * kf[7];
    }
  }
  const int j = key0 + lane;
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const float sc = j <= lim[it] ? s[it] : -INFINITY;
    const float mn = fmaxf(m[it], warp_max(sc));
    const float mref = mn == -INFINITY ? 0.0f : mn;  // a fully masked row so far: keep exp2 finite
    const float alpha = exp2f(m[it] - mref);
    const float pr = exp2f(sc - mref);
    l[it] = l[it] * alpha + pr;
    m[it] = mn;
#pragma unroll
    for (int v = 0; v < Dm::kVpl; ++v) acc[it][v] *= alpha;
    pw[it * kTileKeys + lane] = pr;
  }
  __syncwarp();
  const __nv_bfloat16* vcol = vs + lane * Dm::kVpl;
#pragma unroll 2
  for (int r0 = 0; r0 < kTileKeys; r0 += 4) {
    float vf[4][Dm::kVpl];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const __nv_bfloat16* src = vcol + (r0 + rr) * Dm::kRowPad;
#pragma unroll
      for (int v = 0; v < Dm::kVpl; v += 2) {
        const float2 t = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + v));
        vf[rr][v] = t.x;
        vf[rr][v + 1] = t.y;
      }
    }
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const float4 pr = *reinterpret_cast<const float4*>(pw + it * kTileKeys + r0);
#pragma unroll
      for (int v = 0; v < Dm::kVpl; ++v)
        acc[it][v] += pr.x * vf[0][v] + pr.y * vf[1][v] + pr.z * vf[2][v] + pr.w * vf[3][v];
    }
  }
  __syncwarp();  // pw is rewritten by the next tile
}

// attend_tile_rows with the items' queries one after the other: qw [IT, D].
template <int D, int IT>
__device__ __forceinline__ void attend_tile(const float* qw, const __nv_bfloat16* ks, const __nv_bfloat16* vs,
                                            float* pw, int key0, const int (&lim)[IT], float (&m)[IT],
                                            float (&l)[IT], float (&acc)[IT][Dims<D>::kVpl], int lane) {
  attend_tile_rows<D, IT>([qw](int it) { return qw + it * D; }, ks, vs, pw, key0, lim, m, l, acc, lane);
}

// Launchers (attention_prefill.cu / attention_decode.cu). `smem_limit`: opt-in shared memory per block.
// dca: the Dual Chunk Attention variant (p.q_succ, p.q_inter, p.dca_chunk_len set).
void launch_prefill(const Params& p, int head_dim, int64_t num_tokens, cudaStream_t st, bool dca = false);
// Tensor-core prefill (attention_prefill_tc.cu); false when head_dim has no tensor-core build (64, 128).
bool launch_prefill_tc(const Params& p, int head_dim, int64_t num_tokens, cudaStream_t st);
// Hopper wgmma prefill (attention_prefill_wgmma.cu); false (nothing launched) unless head_dim is 64 / 128,
// the device is sm_90 and the binary carries sm_90a code (the caller also honours KernelOptions::prefill_wgmma).
bool launch_prefill_wgmma(const Params& p, int head_dim, int64_t num_tokens, cudaStream_t st, bool dca = false);
void launch_decode(const Params& p, int head_dim, cudaStream_t st, bool dca = false);
// Dual Chunk Attention decode (paged_attention.cu): the split-KV decode (tensor cores for head_dim 64 / 128, else
// SIMT) with the three query rotations, every sequence one query row; max_context bounds the context lengths
// (launch sizing).
void launch_dual_chunk_decode(Params p, int head_dim, int64_t max_context, ops::Stream s);
// Tensor-core decode with the split combine fused in (attention_decode.cu); head_dim 64 and 128.
// cluster: the split slots (p.num_splits <= kMaxDecodeClusterSplits, > 1) combine as one thread-block
// cluster; only where decode_cluster_available(device). Otherwise p.part_o / part_lse / split_counters.
constexpr int kMaxDecodeClusterSplits = 16;
bool decode_tc_supported(int head_dim);
// CTAs of the tensor-core decode kernel (no cluster, no prologue) one SM holds at once (cached per device).
int decode_tc_resident_ctas_per_sm(int head_dim);
bool decode_cluster_available(int device);
// prologue: the qkv_prologue fused in (the Params' qkv fields; sm_90, D % 8 == 0).
// dca: the Dual Chunk Attention variant (not with prologue).
void launch_decode_tc(const Params& p, int head_dim, int gc, bool cluster, bool prologue, ops::Stream st,
                      bool dca = false);
void launch_combine(const Params& p, int head_dim, cudaStream_t st);

}  // namespace nanovllm::cuda_ops::attn
