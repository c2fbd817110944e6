// Prefill / mixed-batch paged attention (varlen, causal with the cached-prefix offset, GQA).
// CTA = (tile of BM query rows of one sequence, KV head, chunk of GC heads of its GQA group); its
// 4 * IT items (row, head) share every K/V tile, which is loaded once per CTA with cp.async, two stages
// deep (tile i+1 streams in while tile i is computed). Each warp owns IT items (registers: IT x D/32
// accumulators). Query row t of seq s sits at position ctx[s] - (cu[s+1] - t) and sees keys 0..pos.
// Grid x covers sum_s ceil(qlen_s / BM) <= ceil(T / BM) + S tiles; warp 0 maps a CTA to (seq, tile)
// by a warp-parallel scan over cu_seqlens (no host-side metadata needed, graph-capturable).

#include "nanovllm/kernels/cuda/attention_tiles.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"

namespace nanovllm::cuda_ops::attn {
namespace {

template <int D, int IT, bool kDca = false>
struct PrefillCfg {
  static constexpr int kItems = kWarps * IT;
  static constexpr size_t kQBytes = size_t{kDca ? 3 : 1} * kItems * D * 4;        // [rotations, items, D] f32
  static constexpr size_t kKvBytes = size_t{2} * 2 * Dims<D>::kTileElems * 2;      // 2 stages x (K, V)
  static constexpr size_t kPBytes = size_t{kItems} * kTileKeys * 4;                // [items, 32] f32
  static constexpr size_t kSmem = kQBytes + kKvBytes + kPBytes;
};

// kDca: Dual Chunk Attention (p.q_succ, p.q_inter, p.dca_chunk_len): the three query rotations of every item
// in shared memory; each item scores a 32-key tile with the rotation its row uses for the tile's key chunk
// (dca_region; chunks are whole tiles).
template <int D, int IT, bool kDca>
__global__ void __launch_bounds__(kWarps * 32) prefill_kernel(Params p, int rows_per_cta, int gc) {
  using Cfg = PrefillCfg<D, IT, kDca>;
  using Dm = Dims<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* qs = reinterpret_cast<float*>(smem);                                          // [rotations, items, D]
  __nv_bfloat16* kv = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kQBytes);         // [2][K|V][tile]
  float* ps = reinterpret_cast<float*>(smem + Cfg::kQBytes + Cfg::kKvBytes);         // [items, 32]
  __shared__ int tile_info[2];  // seq, first row of the tile (relative to the seq)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kvh = blockIdx.y;
  const int g0 = blockIdx.z * gc;
  const int gcount = min(gc, p.g - g0);

  // CTA -> (sequence, query tile): the tile with running index blockIdx.x; none: grid over-provisioned.
  if (!find_cta_tile<false>(p, rows_per_cta, static_cast<int>(blockIdx.x), warp, lane, tile_info)) return;
  const QueryTile qt = query_tile(p, tile_info, rows_per_cta);

  // Queries -> shared fp32, pre-scaled. Item i = (row i / gc, head g0 + i % gc); unused items are zero.
  constexpr int kRotations = kDca ? 3 : 1;
  for (int c = tid; c < kRotations * Cfg::kItems * Dm::kChunks; c += blockDim.x) {
    const int rot = c / (Cfg::kItems * Dm::kChunks), i = c / Dm::kChunks % Cfg::kItems, cc = c % Dm::kChunks;
    const int r = i / gc, gi = i % gc;
    const __nv_bfloat16* q = kDca ? dca_queries(p, rot) : p.q;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < qt.rows && gi < gcount) {
      const int64_t t = qt.q_begin + qt.row0 + r;
      const int64_t h = int64_t{kvh} * p.g + g0 + gi;
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(q + (t * p.hq + h) * D + cc * 8), f);
    }
    store_scaled_q8(qs + (rot * Cfg::kItems + i) * D + cc * 8, f, p.scale_log2);
  }

  int lim[IT];
  float m[IT], l[IT], acc[IT][Dm::kVpl];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    lim[it] = item_key_limit(qt, warp * IT + it, gc, gcount);
    m[it] = -INFINITY;
    l[it] = 0.0f;
#pragma unroll
    for (int v = 0; v < Dm::kVpl; ++v) acc[it][v] = 0.0f;
  }

  const int ntiles = (qt.nkeys + kTileKeys - 1) / kTileKeys;
  load_tile<D>(p, qt.seq, kvh, 0, qt.nkeys, kv, kv + Dm::kTileElems, tid, blockDim.x);
  cp_async_commit();
  for (int tile = 0; tile < ntiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < ntiles) {
      __nv_bfloat16* nk = kv + (stage ^ 1) * 2 * Dm::kTileElems;
      load_tile<D>(p, qt.seq, kvh, (tile + 1) * kTileKeys, qt.nkeys, nk, nk + Dm::kTileElems, tid, blockDim.x);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile `tile` (and, the first time, the queries) visible to all warps
    const __nv_bfloat16* ks = kv + stage * 2 * Dm::kTileElems;
    const float* qw = qs + warp * IT * D;  // the warp's items
    if constexpr (kDca) {
      // Item it's row sits at position lim[it] (rows past the tile: the last position, output discarded).
      const int key_chunk = tile * kTileKeys / p.dca_chunk_len;
      int rot[IT];
#pragma unroll
      for (int it = 0; it < IT; ++it) rot[it] = dca_region(lim[it], key_chunk, p.dca_chunk_len);
      attend_tile_rows<D, IT>([&](int it) { return qw + (rot[it] * Cfg::kItems + it) * D; }, ks, ks + Dm::kTileElems,
                              ps + warp * IT * kTileKeys, tile * kTileKeys, lim, m, l, acc, lane);
    } else {
      attend_tile<D, IT>(qw, ks, ks + Dm::kTileElems, ps + warp * IT * kTileKeys, tile * kTileKeys, lim, m, l, acc,
                         lane);
    }
    __syncthreads();  // everyone done with this stage before it is refilled
  }

#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int i = warp * IT + it;
    const int r = i / gc, gi = i % gc;
    const float lsum = warp_sum(l[it]);
    if (r < qt.rows && gi < gcount) {
      const float inv = 1.0f / lsum;
      const int64_t t = qt.q_begin + qt.row0 + r;
      const int64_t h = int64_t{kvh} * p.g + g0 + gi;
      __nv_bfloat16* o = p.out + (t * p.hq + h) * D + lane * Dm::kVpl;
#pragma unroll
      for (int v = 0; v < Dm::kVpl; v += 2)
        *reinterpret_cast<__nv_bfloat162*>(o + v) = __floats2bfloat162_rn(acc[it][v] * inv, acc[it][v + 1] * inv);
    }
  }
}

template <int D, int IT, bool kDca>
void launch(const Params& p, int64_t num_tokens, cudaStream_t st) {
  using Cfg = PrefillCfg<D, IT, kDca>;
  static PerDeviceFlag smem_raised;
  once_per_current_device(smem_raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<D, IT, kDca>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(Cfg::kSmem)));
  });
  const int gc = p.g < Cfg::kItems ? p.g : Cfg::kItems;  // heads of the group per CTA
  const int rows_per_cta = Cfg::kItems / gc;
  const int gchunks = (p.g + gc - 1) / gc;
  const int64_t tiles = (num_tokens + rows_per_cta - 1) / rows_per_cta + p.num_seqs;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.hk), static_cast<unsigned>(gchunks));
  prefill_kernel<D, IT, kDca><<<grid, kWarps * 32, Cfg::kSmem, st>>>(p, rows_per_cta, gc);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_prefill(const Params& p, int head_dim, int64_t num_tokens, cudaStream_t st, bool dca) {
  switch (head_dim) {
    case 64: dca ? launch<64, 8, true>(p, num_tokens, st) : launch<64, 8, false>(p, num_tokens, st); break;
    case 128: dca ? launch<128, 8, true>(p, num_tokens, st) : launch<128, 8, false>(p, num_tokens, st); break;
    case 256: dca ? launch<256, 4, true>(p, num_tokens, st) : launch<256, 4, false>(p, num_tokens, st); break;
    default: NANOVLLM_FAIL("paged_attention (cuda): head_dim ", head_dim, " not built (64, 128, 256)");
  }
}

}  // namespace nanovllm::cuda_ops::attn
