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
#include <mutex>

#include "nanovllm/kernels/cuda/attention_common.cuh"

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

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16-byte async copy; `valid == false` writes 16 zero bytes (src-size 0) and reads nothing.
__device__ __forceinline__ void cp_async16_zfill(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void ldsm_x4(unsigned addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
// c += a * b  (16x16 bf16 row-major A, 16x8 bf16 col-major B, fp32 accumulators)
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo -> low 16 bits (the lower column)
  return *reinterpret_cast<const uint32_t*>(&v);
}

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
  const int nunits = p.hk * gchunks;
  const int unit = static_cast<int>(blockIdx.x % static_cast<unsigned>(nunits));
  const int rev = static_cast<int>(blockIdx.x / static_cast<unsigned>(nunits));
  const int kvh = unit / gchunks;
  const int g0 = (unit % gchunks) * gc;
  const int gcount = min(gc, p.g - g0);

  if (warp == 0) {
    // Total tiles, then the tile with running index total - 1 - rev (heaviest first).
    int total = 0;
    for (int s0 = 0; s0 < p.num_seqs; s0 += 32) {
      const int s = s0 + lane;
      if (s < p.num_seqs) total += (p.cu[s + 1] - p.cu[s] + rows_per_cta - 1) / rows_per_cta;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    const int bx = total - 1 - rev;
    int base = 0, found_seq = -1, found_tile = 0;
    for (int s0 = 0; s0 < p.num_seqs && found_seq < 0 && bx >= 0; s0 += 32) {
      const int s = s0 + lane;
      const int qlen = s < p.num_seqs ? p.cu[s + 1] - p.cu[s] : 0;
      const int n = (qlen + rows_per_cta - 1) / rows_per_cta;
      int incl = n;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, base + incl > bx && n > 0);
      if (hit != 0) {
        const int src = __ffs(hit) - 1;
        const int excl = __shfl_sync(0xffffffffu, base + incl - n, src);
        found_seq = s0 + src;
        found_tile = bx - excl;
      }
      base += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) {
      tile_info[0] = found_seq;
      tile_info[1] = found_tile * rows_per_cta;
    }
  }
  __syncthreads();
  const int seq = tile_info[0];
  if (seq < 0) return;  // grid over-provisioned: no tile for this CTA
  const int row0 = tile_info[1];
  const int q_begin = p.cu[seq], q_end = p.cu[seq + 1];
  const int ctx = p.ctx[seq];
  const int rows = min(rows_per_cta, q_end - q_begin - row0);
  const int pos0 = ctx - (q_end - q_begin) + row0;  // position of the tile's first query row
  const int last_pos = pos0 + rows - 1;
  const int nkeys = min(last_pos + 1, ctx);
  const int ntiles = nkeys > 0 ? (nkeys + kBN - 1) / kBN : 0;
  const int32_t* bt = p.bt + int64_t{seq} * p.max_blocks;
  const int64_t head_base = int64_t{kvh} * p.g + g0;

  // Cache slot of key (tile * 64 + tid) for tid < 64 (-1: past the keys this tile may see): one
  // block-table lookup per key, shared by the K and the V copy.
  auto key_slot = [&](int tile) {
    const int j = tile * kBN + tid;
    return tid < kBN && j < nkeys ? bt[j / p.block_size] * p.block_size + j % p.block_size : -1;
  };
  const int cc = tid % C::kChunks, r_base = tid / C::kChunks;
  auto issue_kv = [&](const __nv_bfloat16* cache, __nv_bfloat16* dst, int buf) {
#pragma unroll
    for (int k = 0; k < C::kPasses; ++k) {
      const int r = r_base + k * C::kRowsPerPass;
      const int slot = slots[buf * kBN + r];
      const __nv_bfloat16* src = slot >= 0 ? cache + (int64_t{slot} * p.hk + kvh) * D + cc * 8 : cache;
      cp_async16_zfill(smem_u32(dst + r * C::kStride + cc * 8), src, slot >= 0);
    }
  };

  // Queries (zero rows for unused items) and the first K tile.
  if (tid < kBN) slots[tid] = key_slot(0);
#pragma unroll
  for (int k = 0; k < C::kPasses; ++k) {
    const int i = r_base + k * C::kRowsPerPass;
    const int r = i / gc, gi = i % gc;
    const bool valid = r < rows && gi < gcount;
    const __nv_bfloat16* src =
        valid ? p.q + ((int64_t{q_begin} + row0 + r) * p.hq + head_base + gi) * D + cc * 8 : p.q;
    cp_async16_zfill(smem_u32(qs + i * C::kStride + cc * 8), src, valid);
  }
  __syncthreads();  // slot table 0
  if (ntiles > 0) issue_kv(p.k_cache, ks, 0);
  cp_async_commit();

  // This thread's two items: rows g and g + 8 of the warp's 16. Limit = last key each may see.
  const int gq = lane >> 2, tq = lane & 3;
  int lim[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = warp * 16 + gq + 8 * h;
    const int r = i / gc;
    lim[h] = (r < rows && i % gc < gcount) ? pos0 + r : last_pos;
  }

  const unsigned q_addr = smem_u32(qs + (warp * 16 + (lane & 15)) * C::kStride + (lane >> 4) * 8);
  const unsigned k_addr = smem_u32(ks + ((lane & 7) + ((lane >> 4) << 3)) * C::kStride + ((lane >> 3) & 1) * 8);
  const unsigned v_addr = smem_u32(vs + ((lane & 7) + (((lane >> 3) & 1) << 3)) * C::kStride + (lane >> 4) * 8);

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
    issue_kv(p.v_cache, vs, buf);
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
    if (key0 + kBN - 1 > pos0) {  // causal diagonal (or the ragged end): mask keys past each row's limit
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kj = key0 + n * 8 + 2 * tq + (e & 1);
          if (kj > lim[e >> 1]) s[n][e] = -INFINITY;
        }
      }
    }

    // Online softmax (rows gq and gq + 8; each row's 64 scores live in the 4 lanes of a quad).
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    float mref[2], alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      mref[h] = mx[h] == -INFINITY ? 0.0f : mx[h] * sl2;  // a fully masked row so far: keep exp2 finite
      alpha[h] = ex2(m[h] * sl2 - mref[h]);
      m[h] = mx[h];
    }
    uint32_t pa[4][4];  // P as the A operand of 4 k-steps (16 keys each)
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float p0 = ex2(fmaf(s[n][0], sl2, -mref[0])), p1 = ex2(fmaf(s[n][1], sl2, -mref[0]));
      const float p2 = ex2(fmaf(s[n][2], sl2, -mref[1])), p3 = ex2(fmaf(s[n][3], sl2, -mref[1]));
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      pa[n >> 1][(n & 1) * 2 + 0] = pack_bf16(p0, p1);
      pa[n >> 1][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] = l[h] * alpha[h] + rs[h];
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }

    if (tid < kBN) slots[(buf ^ 1) * kBN + tid] = next_slot;
    cp_async_wait<0>();
    __syncthreads();  // V_tile landed; everyone done with K_tile; next slot table visible
    if (tile + 1 < ntiles) issue_kv(p.k_cache, ks, buf ^ 1);
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
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float t = l[h];
    t += __shfl_xor_sync(0xffffffffu, t, 1);
    t += __shfl_xor_sync(0xffffffffu, t, 2);
    inv[h] = t > 0.0f ? 1.0f / t : 0.0f;
  }
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
    if (r < rows && gi < gcount) {
      const uint4 v = *reinterpret_cast<const uint4*>(qs + i * C::kStride + ch * 8);
      *reinterpret_cast<uint4*>(p.out + ((int64_t{q_begin} + row0 + r) * p.hq + head_base + gi) * D + ch * 8) = v;
    }
  }
}

template <int D>
void launch(const Params& p, int64_t num_tokens, cudaStream_t st) {
  using C = TcCfg<D>;
  static std::once_flag once;  // raise the dynamic shared-memory limit once per instance (all devices alike)
  std::call_once(once, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(C::kSmem)));
  });
  const int gc = p.g < kBM ? p.g : kBM;  // heads of the group packed along M
  const int gchunks = (p.g + gc - 1) / gc;
  const int rows_per_cta = kBM / gc;
  const int64_t tiles = (num_tokens + rows_per_cta - 1) / rows_per_cta + p.num_seqs;
  const int64_t ctas = tiles * p.hk * gchunks;
  NANOVLLM_CHECK(ctas < (int64_t{1} << 31), "paged_attention (cuda): prefill grid too large (", ctas, " CTAs)");
  prefill_tc_kernel<D><<<static_cast<unsigned>(ctas), kThreads, C::kSmem, st>>>(p, rows_per_cta, gc, gchunks);
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
