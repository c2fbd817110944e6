// Tensor-core prefill / mixed-batch paged attention (FlashAttention-2 style), head_dim 64 and 128.
//
// CTA = 4 warps = 64 "items" (M rows); item i = (query row i / gc, head g0 + i % gc) of one KV head's
// GQA group: the group's heads are packed along M so every K/V tile loaded into shared memory serves
// all of them (no reliance on L2 for cross-head reuse, and a short query — a decode token in a mixed
// batch, a small chunk — fills gc rows instead of 1). For long queries the packed and unpacked layouts
// do the same MMA work; packing just never does more. Warp w owns items [16w, 16w + 16).
//
// Per 64-key tile (keys gathered row by row through the block table with 16-byte cp.async, so any
// block size works; keys past the tile's last position are zero-filled):
//   S = Q K^T    mma.sync m16n8k16 bf16 -> fp32; Q fragments stay in registers (loaded once by
//                ldmatrix), K fragments by ldmatrix from padded rows (D + 8 bf16: conflict-free);
//   mask         only on tiles that reach past the tile's first query position (causal diagonal);
//   softmax      online, base 2: p = 2^(s * scale log2e - m * scale log2e) as one FFMA + MUFU.EX2;
//   O += P V     P re-packed to bf16 in registers as the A operand (S accumulator layout == A
//                fragment layout), V fragments by ldmatrix.trans.
// Pipelining (FA2): one K and one V buffer; V_j streams in during S_j, K_{j+1} during P_j V_j.
// Key tiles past the tile's last query position are never visited (causal early exit).
//
// CTA -> (sequence, query tile) is found on the device by a warp scan over cu_seqlens (graph
// capturable); tiles are issued heaviest first (the last tiles of the last sequence) so long causal
// rows do not form the tail of the grid. Grid = (ceil(T / rows) + S) tiles x Hk x head chunks,
// flattened; surplus CTAs exit.

#include "nanovllm/kernels/cuda/attention_softmax.cuh"
#include "nanovllm/kernels/cuda/attention_tiles.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"

namespace nanovllm::cuda_ops::attn {
namespace {

constexpr int kBM = 64;  // items (M rows) per CTA
constexpr int kBN = 64;  // keys per tile
constexpr int kThreads = 128;

template <int D>
struct TcCfg {
  static constexpr int kStride = D + 8;                // bf16 per shared row (+16 B: ldmatrix conflict-free)
  static constexpr int kTile = kBM * kStride;          // bf16 per Q / K / V tile (kBM == kBN)
  static constexpr int kChunks = D / 8;                // 16-byte chunks per row
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kPasses = kBN / kRowsPerPass;   // 16-byte copies per thread per tile
  static constexpr int kKSteps = D / 16;               // k-steps of Q K^T; also 16-dim pairs of P V
  static constexpr size_t kSmem = size_t{3} * kTile * 2 + size_t{2} * kBN * 4;  // Q, K, V + 2 slot tables
};

// Occupancy target: on sm_90 3 (D 128: 168 registers, 53 KB shared) or 4 (D 64) CTAs per SM; older
// targets (smaller register budget after ptxas's choices, less shared memory) are left at 2 to avoid spills.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define NANOVLLM_TC_MIN_CTAS(D) 2
#else
#define NANOVLLM_TC_MIN_CTAS(D) ((D) == 128 ? 3 : 4)
#endif

template <int D>
__global__ void __launch_bounds__(kThreads, NANOVLLM_TC_MIN_CTAS(D))
    prefill_tc_kernel(Params p, int rows_per_cta, int gc, int gchunks) {
  using C = TcCfg<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);  // [64 items][kStride]; output staging at the end
  __nv_bfloat16* ks = qs + C::kTile;                            // [64 keys][kStride]
  __nv_bfloat16* vs = ks + C::kTile;                            // [64 keys][kStride]
  int* slots = reinterpret_cast<int*>(vs + C::kTile);           // [2][64] cache slot of each key of a tile, -1 = none
  __shared__ int tile_info[2];                                  // seq (-1: no work), first query row (in the seq)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const PackedUnit u = packed_unit(p, gc, gchunks);

  // CTA -> (sequence, query tile), heaviest first; none: the grid is over-provisioned.
  if (!find_cta_tile<true>(p, rows_per_cta, u.rev, warp, lane, tile_info)) return;
  const QueryTile qt = query_tile(p, tile_info, rows_per_cta);
  const int ntiles = qt.nkeys > 0 ? (qt.nkeys + kBN - 1) / kBN : 0;
  const int32_t* bt = block_table(p, qt.seq);

  // Cache slot of key (tile * 64 + tid) for tid < 64 (-1: past the keys this tile may see): one
  // block-table lookup per key, shared by the K and the V copy.
  auto key_slot = [&](int tile) {
    const int j = tile * kBN + tid;
    return tid < kBN && j < qt.nkeys ? paged_slot(bt, j, p.block_size) : -1;
  };
  const int cc = tid % C::kChunks, r_base = tid / C::kChunks;
  // scale: an fp8 cache's row scales (kv_fp8.cuh): plain loads of 8 codes, stored as bf16 of code x scale.
  auto issue_kv = [&](const __nv_bfloat16* cache, const float* scale, __nv_bfloat16* dst, int buf) {
#pragma unroll
    for (int k = 0; k < C::kPasses; ++k) {
      const int r = r_base + k * C::kRowsPerPass;
      const int slot = slots[buf * kBN + r];
      const int64_t row = int64_t{slot} * p.hk + u.kvh;
      if (scale != nullptr) {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (slot >= 0)
          v = fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(reinterpret_cast<const uint8_t*>(cache) + row * D + cc * 8),
                              scale[row]);
        *reinterpret_cast<uint4*>(dst + r * C::kStride + cc * 8) = v;
        continue;
      }
      const __nv_bfloat16* src = slot >= 0 ? cache + row * D + cc * 8 : cache;
      cp_async16_zfill(smem_u32(dst + r * C::kStride + cc * 8), src, slot >= 0);
    }
  };

  // Queries (zero rows for unused items) and the first K tile.
  if (tid < kBN) slots[tid] = key_slot(0);
#pragma unroll
  for (int k = 0; k < C::kPasses; ++k) {
    const int i = r_base + k * C::kRowsPerPass;
    const int r = i / gc, gi = i % gc;
    const bool valid = r < qt.rows && gi < u.gcount;
    const __nv_bfloat16* src = valid ? p.q + packed_row(p, qt, u, r, gi) * D + cc * 8 : p.q;
    cp_async16_zfill(smem_u32(qs + i * C::kStride + cc * 8), src, valid);
  }
  __syncthreads();  // slot table 0
  if (ntiles > 0) issue_kv(p.k_cache, p.k_scale, ks, 0);
  cp_async_commit();

  // This thread's two items: rows g and g + 8 of the warp's 16. Limit = last key each may see.
  const int gq = lane >> 2, tq = lane & 3;
  int lim[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) lim[h] = item_key_limit(qt, warp * 16 + gq + 8 * h, gc, u.gcount);

  const unsigned q_addr = smem_u32(qs + (warp * 16 + (lane & 15)) * C::kStride + (lane >> 4) * 8);
  const unsigned k_addr = smem_u32(ks + ldsm_b_offset(lane, C::kStride));
  const unsigned v_addr = smem_u32(vs + ldsm_bt_offset(lane, C::kStride));

  uint32_t qf[C::kKSteps][4];
  float o[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = p.scale_log2;

  for (int tile = 0; tile < ntiles; ++tile) {
    const int buf = tile & 1;
    cp_async_wait<0>();
    __syncthreads();  // K_tile (and Q) landed; everyone done with V_{tile-1} and slot table buf ^ 1
    issue_kv(p.v_cache, p.v_scale, vs, buf);
    cp_async_commit();
    // Block-table lookup for the next tile: loaded now, stored after the MMAs (latency hidden).
    const int next_slot = tile + 1 < ntiles ? key_slot(tile + 1) : -1;
    if (tile == 0) {
#pragma unroll
      for (int kk = 0; kk < C::kKSteps; ++kk) ldsm_x4(q_addr + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
    }

    // S = Q K^T: [16 items x 64 keys] per warp, 8 n-tiles of 8 keys.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(k_addr + (np * 16 * C::kStride + kk * 16) * 2, b0, b1, b2, b3);
        mma16816(s[2 * np], qf[kk], b0, b1);
        mma16816(s[2 * np + 1], qf[kk], b2, b3);
      }
    }

    const int key0 = tile * kBN;
    // causal diagonal (or the ragged end): mask keys past each row's limit
    if (key0 + kBN - 1 > qt.pos0) mask_scores(s, key0, tq, lim);

    // Online softmax (rows gq and gq + 8; each row's 64 scores live in the 4 lanes of a quad).
    float alpha[2];
    uint32_t pa[4][4];  // P as the A operand of 4 k-steps (16 keys each)
    online_softmax(s, sl2, m, l, alpha, pa);
    scale_rows(o, alpha);

    if (tid < kBN) slots[(buf ^ 1) * kBN + tid] = next_slot;
    cp_async_wait<0>();
    __syncthreads();  // V_tile landed; everyone done with K_tile; next slot table visible
    if (tile + 1 < ntiles) issue_kv(p.k_cache, p.k_scale, ks, buf ^ 1);
    cp_async_commit();

    // O += P V: k-steps over 16 keys, n-tiles over 8 dims (pairs of 16 per ldmatrix.trans).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int dp = 0; dp < C::kKSteps; ++dp) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(v_addr + (kk * 16 * C::kStride + dp * 16) * 2, b0, b1, b2, b3);
        mma16816(o[2 * dp], pa[kk], b0, b1);
        mma16816(o[2 * dp + 1], pa[kk], b2, b3);
      }
    }
  }

  // Epilogue: normalise, stage the warp's 16 rows as bf16 in its own Q rows, 16-byte stores out.
  cp_async_wait<0>();
  __syncthreads();  // (ntiles == 0: the Q copies must land before the staging overwrites them)
  float inv[2];
  inv_row_sums(l, inv);
  __nv_bfloat16* stage = qs + (warp * 16 + gq) * C::kStride + 2 * tq;
#pragma unroll
  for (int d = 0; d < D / 8; ++d) {
    *reinterpret_cast<__nv_bfloat162*>(stage + d * 8) = __floats2bfloat162_rn(o[d][0] * inv[0], o[d][1] * inv[0]);
    *reinterpret_cast<__nv_bfloat162*>(stage + 8 * C::kStride + d * 8) =
        __floats2bfloat162_rn(o[d][2] * inv[1], o[d][3] * inv[1]);
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 16 * C::kChunks / 32; ++k) {
    const int c = lane + 32 * k;
    const int i = warp * 16 + c / C::kChunks, ch = c % C::kChunks;
    const int r = i / gc, gi = i % gc;
    if (r < qt.rows && gi < u.gcount) {
      const uint4 v = *reinterpret_cast<const uint4*>(qs + i * C::kStride + ch * 8);
      *reinterpret_cast<uint4*>(p.out + packed_row(p, qt, u, r, gi) * D + ch * 8) = v;
    }
  }
}

template <int D>
void launch(const Params& p, int64_t num_tokens, cudaStream_t st) {
  using C = TcCfg<D>;
  static PerDeviceFlag smem_raised;
  once_per_current_device(smem_raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(C::kSmem)));
  });
  const PackedGrid g = packed_grid(p, num_tokens, kBM);
  prefill_tc_kernel<D><<<g.ctas, kThreads, C::kSmem, st>>>(p, g.rows_per_cta, g.gc, g.gchunks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool launch_prefill_tc(const Params& p, int head_dim, int64_t num_tokens, cudaStream_t st) {
  switch (head_dim) {
    case 64: launch<64>(p, num_tokens, st); return true;
    case 128: launch<128>(p, num_tokens, st); return true;
    default: return false;
  }
}

}  // namespace nanovllm::cuda_ops::attn
