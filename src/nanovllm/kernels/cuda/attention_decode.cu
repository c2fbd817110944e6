// Decode paged attention (every query length is 1).
//
// head_dim 64 / 128: tensor-core split-KV kernel with the split combine fused in (decode_tc_kernel).
// head_dim 256 (and any other build): the SIMT split-KV kernel + combine_kernel below.
// Dual Chunk Attention (kernels/dual_chunk_ops.h): both kernels with their kDca switch, which scores each key
// tile with the query rotation of its key chunk (one online softmax over the three partial attentions).
//
// ---- Tensor-core decode (decode_tc_kernel) ----
// Grid (seq, KV head x head chunk, split slot). The CTA's GQA group (<= 16 heads) forms the 16 M rows
// of mma.sync m16n8k16 (zero rows pad small groups: decode is bound by the KV read, the padded MMA work
// costs ~10% of the tensor pipe at full bandwidth). Splits are chosen per sequence on the device from
// context_lens: ns = clamp(ctx / min_split_keys, 1, gridDim.z), ranges rounded to 64 keys; split slots
// >= ns exit after reading two ints, so a grid sized for meta.max_context_len (CUDA graphs) costs
// almost nothing for short contexts.
// Each of the 4 warps owns 16-key tiles warp, warp + 4, ... of the split's range and runs its own
// 3-stage cp.async pipeline in private shared memory (no block barrier in the key loop): per tile, the
// 16 lanes' block-table lookups (one per key, fetched a tile ahead) are broadcast by shuffles, every
// cp.async covers 2 (D 128) or 4 (D 64) whole 256 / 128-byte rows (full sectors), K fragments come by
// ldmatrix, V fragments by ldmatrix.trans, P stays in registers (S accumulator layout == A fragment).
// Warps merge their softmax states in shared memory. One split: bf16 output directly. Several: the
// CTA writes its normalised fp32 partial and log2-sum-exp, bumps an arrival counter, and the last CTA
// of the (seq, KV head) group merges all partials (read from L2) and resets the counter (no combine
// launch; graph replays start from zero counters). On sm_90 the split slots of a (seq, unit) run as one
// thread-block cluster instead (decode_tc_kernel<..., true>): each CTA leaves its partial in its own
// shared memory, and after a cluster barrier the CTAs merge a slice of the output each, reading the
// partials through distributed shared memory. No global round trips (partial stores, fence, atomic,
// partial loads) sit on the step's critical path: at batch 1 they were 2-4 us of a 7-12 us attention
// (H200, CUPTI timeline + in-kernel marks, Qwen3-0.6B / 8B layers at context 1024).
//
// ---- SIMT split-KV decode (decode_kernel, head_dim 256; Dual Chunk Attention) ----
// Grid (seq, KV head x head chunk, split). A CTA owns keys [split * chunk, ...) of its sequence for all
// IT heads of its GQA group (queries shared in shared memory, fp32 pre-scaled). Its 4 warps take
// alternate 32-key tiles of that range, each through its own shared-memory tile (cp.async, no block
// barrier in the loop); several CTAs per SM keep enough loads in flight. The warps' softmax states are
// merged in shared memory at the end. With one split the CTA writes bf16 output directly; otherwise it
// writes the normalised partial output and its log2-sum-exp, and combine_kernel merges the splits. Dual
// Chunk Attention keeps the three query rotations in shared memory and scores each 32-key tile with its key
// chunk's: one online softmax over all keys is vLLM's log-sum-exp merge of the three partial attentions.
#include <mutex>

#include "nanovllm/kernels/cuda/attention_common.cuh"
#include "nanovllm/kernels/cuda/attention_softmax.cuh"
#include "nanovllm/kernels/cuda/cluster.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"
#include "nanovllm/kernels/cuda/qkv_rope.cuh"

namespace nanovllm::cuda_ops::attn {
namespace {

template <int D, int IT, bool kDca = false>
struct DecodeCfg {
  static constexpr size_t kQBytes = size_t{kDca ? 3 : 1} * IT * D * 4;       // [rotations, IT, D] f32
  static constexpr size_t kWarpTileBytes = size_t{2} * Dims<D>::kTileElems * 2;  // K and V tile per warp
  static constexpr size_t kPBytes = size_t{kWarps} * IT * kTileKeys * 4;    // [warps, IT, 32]
  static constexpr size_t kSmem = kQBytes + kWarps * kWarpTileBytes + kPBytes;
  // Final merge reuses each warp's tile region for [IT, D] acc + [IT] m + [IT] l.
  static_assert(size_t{IT} * (D + 2) * 4 <= kWarpTileBytes, "merge scratch must fit a warp's tile region");
};

// kDca: Dual Chunk Attention (p.q_succ, p.q_inter, p.dca_chunk_len): the three query rotations in shared
// memory, each 32-key tile scored with the rotation of its key chunk (dca_region; chunks are whole tiles).
template <int D, int IT, bool kDca>
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(Params p, int gc) {
  using Cfg = DecodeCfg<D, IT, kDca>;
  using Dm = Dims<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* qs = reinterpret_cast<float*>(smem);  // [rotations, IT, D]
  unsigned char* tiles = smem + Cfg::kQBytes;  // [warps][K tile | V tile]
  float* ps = reinterpret_cast<float*>(smem + Cfg::kQBytes + kWarps * Cfg::kWarpTileBytes);  // [warps, IT, 32]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = blockIdx.x;
  const int gchunks = (p.g + gc - 1) / gc;
  const int kvh = blockIdx.y / gchunks;
  const int g0 = (blockIdx.y % gchunks) * gc;
  const int gcount = min(gc, p.g - g0);
  const int split = blockIdx.z;
  if (p.cu[seq + 1] - p.cu[seq] != 1) return;  // no query row for this sequence in this step
  const int64_t t = p.cu[seq];
  const int ctx = p.ctx[seq];
  // Split ranges are multiples of the CTA's stride (4 tiles) so warps stay balanced.
  const int stride = kWarps * kTileKeys;
  const int per_split = ((ctx + p.num_splits - 1) / p.num_splits + stride - 1) / stride * stride;
  const int k_begin = split * per_split;
  const int k_end = min(ctx, k_begin + per_split);

  constexpr int kRotations = kDca ? 3 : 1;
  for (int c = tid; c < kRotations * IT * Dm::kChunks; c += blockDim.x) {
    const int r = c / (IT * Dm::kChunks), i = c / Dm::kChunks % IT, cc = c % Dm::kChunks;
    const __nv_bfloat16* q = kDca ? dca_queries(p, r) : p.q;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (i < gcount) {
      const int64_t h = int64_t{kvh} * p.g + g0 + i;
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(q + (t * p.hq + h) * D + cc * 8), f);
    }
    store_scaled_q8(qs + (r * IT + i) * D + cc * 8, f, p.scale_log2);
  }
  __syncthreads();

  int lim[IT];
  float m[IT], l[IT], acc[IT][Dm::kVpl];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    lim[it] = k_end - 1;
    m[it] = -INFINITY;
    l[it] = 0.0f;
#pragma unroll
    for (int v = 0; v < Dm::kVpl; ++v) acc[it][v] = 0.0f;
  }
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(tiles + warp * Cfg::kWarpTileBytes);
  __nv_bfloat16* vs = ks + Dm::kTileElems;
  float* pw = ps + warp * IT * kTileKeys;
  for (int key0 = k_begin + warp * kTileKeys; key0 < k_end; key0 += stride) {
    load_tile<D>(p, seq, kvh, key0, k_end, ks, vs, lane, 32);
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();
    const float* qw = qs;  // the query row is at position ctx - 1
    if constexpr (kDca) qw += dca_region(ctx - 1, key0 / p.dca_chunk_len, p.dca_chunk_len) * IT * D;
    attend_tile<D, IT>(qw, ks, vs, pw, key0, lim, m, l, acc, lane);
  }

  // Merge the 4 warps: each publishes (m, l, acc) in its own tile region.
  float* mine = reinterpret_cast<float*>(tiles + warp * Cfg::kWarpTileBytes);  // [IT, D] acc, [IT] m, [IT] l
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const float lsum = warp_sum(l[it]);
#pragma unroll
    for (int v = 0; v < Dm::kVpl; ++v) mine[it * D + lane * Dm::kVpl + v] = acc[it][v];
    if (lane == 0) {
      mine[IT * D + it] = m[it];
      mine[IT * D + IT + it] = lsum;
    }
  }
  __syncthreads();
  for (int e = tid; e < IT * D; e += blockDim.x) {
    const int it = e / D, d = e % D;
    if (it >= gcount) continue;
    float mw[kWarps], mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      mw[w] = reinterpret_cast<const float*>(tiles + w * Cfg::kWarpTileBytes)[IT * D + it];
      mx = fmaxf(mx, mw[w]);
    }
    float lsum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* src = reinterpret_cast<const float*>(tiles + w * Cfg::kWarpTileBytes);
      const float sc = mw[w] == -INFINITY ? 0.0f : exp2f(mw[w] - mx);
      lsum += src[IT * D + IT + it] * sc;
      o += src[it * D + d] * sc;
    }
    const int64_t h = int64_t{kvh} * p.g + g0 + it;
    if (p.num_splits == 1) {
      p.out[(t * p.hq + h) * D + d] = __float2bfloat16_rn(o / lsum);
    } else {
      const int64_t part = (int64_t{seq} * p.hq + h) * p.num_splits + split;
      p.part_o[part * D + d] = lsum > 0.0f ? o / lsum : 0.0f;
      if (d == 0) p.part_lse[part] = lsum > 0.0f ? mx + log2f(lsum) : -INFINITY;
    }
  }
}

// out[t, h, :] = sum_i 2^(lse_i - L) o_i with L = log2 sum_i 2^lse_i. Block per (seq, head), D threads.
template <int D>
__global__ void __launch_bounds__(D) combine_kernel(Params p) {
  const int seq = blockIdx.x / p.hq, h = blockIdx.x % p.hq, d = threadIdx.x;
  if (p.cu[seq + 1] - p.cu[seq] != 1) return;
  const int64_t t = p.cu[seq];
  const int64_t base = (int64_t{seq} * p.hq + h) * p.num_splits;
  float mx = -INFINITY;
  for (int i = 0; i < p.num_splits; ++i) mx = fmaxf(mx, p.part_lse[base + i]);
  float wsum = 0.0f, o = 0.0f;
  for (int i = 0; i < p.num_splits; ++i) {
    const float lse = p.part_lse[base + i];
    const float w = lse == -INFINITY ? 0.0f : exp2f(lse - mx);
    wsum += w;
    o += w * p.part_o[(base + i) * D + d];
  }
  p.out[(t * p.hq + h) * D + d] = __float2bfloat16_rn(o / wsum);
}

template <int D, int IT, bool kDca>
void launch(const Params& p, int gc, cudaStream_t st) {
  using Cfg = DecodeCfg<D, IT, kDca>;
  static PerDeviceFlag smem_raised;
  once_per_current_device(smem_raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<D, IT, kDca>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(Cfg::kSmem)));
  });
  const int gchunks = (p.g + gc - 1) / gc;
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(p.hk * gchunks),
                  static_cast<unsigned>(p.num_splits));
  decode_kernel<D, IT, kDca><<<grid, kWarps * 32, Cfg::kSmem, st>>>(p, gc);
  CUDA_CHECK_LAUNCH();
}

template <int D, bool kDca>
void launch_for_group(const Params& p, cudaStream_t st) {
  // IT = the group size rounded up to a power of two (at most 16, 8 for D = 256; larger groups use head chunks).
  if (p.g <= 1) launch<D, 1, kDca>(p, 1, st);
  else if (p.g <= 2) launch<D, 2, kDca>(p, 2, st);
  else if (p.g <= 4) launch<D, 4, kDca>(p, 4, st);
  else if (p.g <= 8) launch<D, 8, kDca>(p, 8, st);
  else if constexpr (D > 128) launch<D, 8, kDca>(p, 8, st);  // D = 256: keep shared memory <= ~150 KB
  else launch<D, 16, kDca>(p, 16, st);
}


// ---------------------------------------------------------------------------------------------------
// Tensor-core decode.

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * 32;
constexpr int kTcKeys = 16;                      // keys per warp tile (one k-step of P V)
constexpr int kTcSpan = kTcWarps * kTcKeys;      // split ranges are multiples of this (balanced warps)
constexpr int kTcRows = 16;                      // MMA rows = heads of one chunk of the GQA group
constexpr unsigned kFull = 0xffffffffu;
constexpr int kTcMaxSplits = 32;                 // split slots (gridDim.z) the fused combine can merge
constexpr int kTcMaxClusterSplits = kMaxDecodeClusterSplits;  // cluster size (16: non-portable, sm_90)

template <int D, int NST>
struct TcDec {
  static constexpr int kStride = D + 8;                      // bf16 per shared row (+16 B: ldmatrix conflict-free)
  static constexpr int kTileElems = kTcKeys * kStride;       // one K (or V) tile
  static constexpr int kStageElems = 2 * kTileElems;         // K tile, V tile
  static constexpr int kWarpBytes = NST * kStageElems * 2;   // a warp's private pipeline
  static constexpr int kChunks = D / 8;                      // 16-byte chunks per row
  static constexpr int kRowsPerCopy = 32 / kChunks;          // rows one warp-wide cp.async covers
  static constexpr int kCopies = kTcKeys / kRowsPerCopy;     // cp.async per lane per K (or V) tile
  static constexpr int kKSteps = D / 16;
  static constexpr int kMergeStride = D + 4;                 // f32 per merge-scratch row
  static constexpr size_t kSmem = size_t{kTcWarps} * kWarpBytes;
  // The final merge reuses each warp's pipeline region: [16][kMergeStride] o, [16] m, [16] l; the
  // fused combine then the whole: [16][kTcMaxSplits] split weights, [16] their sums.
  static_assert(size_t{kTcRows} * (kMergeStride + 2) * 4 <= size_t{kWarpBytes}, "merge scratch must fit");
  // Cluster combine: the CTA's merged partial, [16][D] o and [16] lse (f32), in warp 0's region after
  // its merge scratch (so the merge can write it while every warp still reads the scratch).
  static constexpr int kClusterOff = (kTcRows * (kMergeStride + 2) * 4 + 15) / 16 * 16;
  static_assert(kClusterOff + kTcRows * (D + 1) * 4 <= kWarpBytes, "cluster partial must fit");
  static_assert(size_t{kTcRows} * (kTcMaxSplits + 1) * 4 <= kTcWarps * size_t{kWarpBytes}, "combine scratch");
  static_assert(32 % kChunks == 0 && kTcKeys % kRowsPerCopy == 0, "row copy layout");
  // An fp8 cache (kFp8): a stage is the K tile's and the V tile's codes, rows of D bytes kCodeStride apart (+16 B:
  // the fragment loads are conflict-free at D 128, 2-way on a quarter of them at D 64), then the 16 K and the 16 V
  // row scales (f32). A stage is about half a bf16 one, so the same warp region holds kCodeStages of them: as many
  // bytes in flight per warp as the bf16 pipeline.
  static constexpr int kCodeStride = D + 16;
  static constexpr int kCodeTileBytes = kTcKeys * kCodeStride;
  static constexpr int kCodeStageBytes = 2 * kCodeTileBytes + 2 * kTcKeys * 4;
  static constexpr int kCodeStages = kWarpBytes / kCodeStageBytes < 6 ? kWarpBytes / kCodeStageBytes : 6;
  static constexpr int kCodeChunks = D / 16;                 // 16-byte chunks per code row
  static constexpr int kCodeRowsPerCopy = 32 / kCodeChunks;
  static constexpr int kCodeCopies = kTcKeys / kCodeRowsPerCopy;  // cp.async per lane per K (or V) tile
  static_assert(32 % kCodeChunks == 0 && kTcKeys % kCodeRowsPerCopy == 0, "code copy layout");
  static_assert(kCodeStages >= 2 && kCodeStride % 16 == 0, "fp8 pipeline");
};

// Keys per split for a context of `ctx` keys and at most `max_splits` splits (device and host agree).
__device__ __forceinline__ int tc_split_chunk(int ctx, int max_splits, int min_split_keys) {
  const int want = max(1, min(max_splits, ctx / max(min_split_keys, 1)));
  const int chunk = (ctx + want - 1) / want;
  return max(kTcSpan, (chunk + kTcSpan - 1) / kTcSpan * kTcSpan);
}

// Occupancy: D 128 with 3 stages = 102 KB shared -> 2 CTAs per SM on sm_90 (4 for D 64).
// kCluster: gridDim.z split slots form one cluster (sm_90), see the file comment.
// kPro: the attention prologue fused in (decode steps): after the wait every CTA makes q of its heads
// from qkv (norm + RoPE, qkv_rope.cuh, rounded as qkv_prologue rounds it) into shared memory, and the CTA
// whose keys include the token's own (key ctx - 1) makes its K / V row, stores it to the caches and
// puts it into the warp tile that holds that key (whose cp.async brought the stale cache row). So all
// old keys are copied before the wait, and one dependent launch per layer goes.
// kDca: Dual Chunk Attention (p.q_succ, p.q_inter, p.dca_chunk_len; not with kPro): a warp's Q fragments hold the
// rotation of its current tile's key chunk (dca_region) and are reloaded when a tile starts another region (a warp's
// tiles run in key order: at most twice).
// kFp8: an fp8 cache (p.k_scale / p.v_scale, kv_fp8.cuh): the pipeline moves the codes (half the bytes) and the
// rows' scales by cp.async into kCodeStages smaller stages, and each tile runs on the codes (attend_fp8_tile: f16
// MMAs on the exactly converted codes, the scales applied to S and P in f32). Not with kPro (it stores bf16 rows)
// or kDca (the engine refuses fp8 with Dual Chunk Attention).
template <int D, int NST, bool kCluster, bool kPro, bool kDca = false, bool kFp8 = false>
__global__ void __launch_bounds__(kTcThreads, D == 128 ? 2 : 4) decode_tc_kernel(Params p, int gc, int gchunks) {
  static_assert(!(kPro && kDca), "the fused prologue makes one query rotation");
  static_assert(!(kFp8 && (kPro || kDca)), "an fp8 cache runs without the fused prologue and Dual Chunk Attention");
  using C = TcDec<D, NST>;
  constexpr int kSt = kFp8 ? C::kCodeStages : NST;  // pipeline stages per warp
  extern __shared__ __align__(16) unsigned char smem[];  // [warps][stages][K tile | V tile]
  __shared__ int s_last;
  // kPro only (1-element placeholders otherwise): RoPE table, the CTA's q rows, the new key's K and V.
  __shared__ float pro_cs[kPro ? D : 1];                                             // [D/2] cos, [D/2] sin
  __shared__ __align__(16) __nv_bfloat16 pro_q[kPro ? kTcRows * (D + 8) : 1];       // [16][D + 8]
  __shared__ __align__(16) __nv_bfloat16 pro_kv[kPro ? 2 * D : 1];                   // [K | V][D]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = static_cast<int>(blockIdx.x);
  const int unit = static_cast<int>(blockIdx.y);
  const int split = static_cast<int>(blockIdx.z);
  const int t = p.cu[seq];
  const int qlen = p.cu[seq + 1] - t;
  const int ctx = max(p.ctx[seq], 0);
  if (qlen != 1) return;  // no query row for this sequence in this step (uniform across a cluster)
  const int chunk = tc_split_chunk(ctx, static_cast<int>(gridDim.z), p.min_split_keys);
  const int ns = max(1, (ctx + chunk - 1) / chunk);  // splits with work (>= 1 so ctx 0 writes zeros)
  // Idle split slots exit, except in a combining cluster: there they run without keys (no tiles, no
  // output of their own) and take their share of the combine.
  if (split >= ns && !(kCluster && ns > 1)) return;
  const int k_begin = split * chunk;
  const int k_end = min(ctx, k_begin + chunk);
  const int ntiles = k_end > k_begin ? (k_end - k_begin + kTcKeys - 1) / kTcKeys : 0;
  const int my_tiles = ntiles > warp ? (ntiles - 1 - warp) / kTcWarps + 1 : 0;  // tiles warp, warp + 4, ...

  const int kvh = unit / gchunks;
  const int g0 = (unit % gchunks) * gc;
  const int gcount = min(gc, p.g - g0);
  const int64_t head0 = int64_t{kvh} * p.g + g0;
  const int gq = lane >> 2, tq = lane & 3;
  // kPro: this CTA attends to the token's own key (the last of the context) and the token is cached.
  const bool owns_new_key = kPro && ctx > 0 && ctx - 1 >= k_begin && ctx - 1 < k_end && p.slots[t] >= 0;
  if constexpr (kPro)
    rope_table(pro_cs, D / 2, static_cast<float>(p.positions[t]), p.inv_freq, p.rope_pairs, p.rope_scaling);

  // Block-table lookup of key (tile ti, lane & 15): cache slot, or -1 past the range.
  const int32_t* bt = block_table(p, seq);
  auto slot_of = [&](int local) -> int {
    const int j = k_begin + (warp + local * kTcWarps) * kTcKeys + (lane & (kTcKeys - 1));
    return local < my_tiles && j < k_end ? paged_slot(bt, j, p.block_size) : -1;
  };
  // Lookups for the first kSt tiles together (independent loads), before anything waits on them.
  int slot_pro[kSt];
#pragma unroll
  for (int s = 0; s < kSt; ++s) slot_pro[s] = slot_of(s);

  unsigned char* wbase = smem + warp * C::kWarpBytes;
  const unsigned wbase_s = smem_u32(wbase);
  // Copy the tile whose key slots lane l (mod 16) holds in `slot_reg` into `stage`.
  const int cc = lane % C::kChunks, r0 = lane / C::kChunks;
  auto issue = [&](int slot_reg, int stage) {
    if constexpr (kFp8) {
      // Codes: kCodeCopies 16-byte chunks per lane per tile; scales: lane l < 16 the K scale of key l, lane l >= 16
      // the V scale of key l - 16 (slot_reg of lane l is key l mod 16's).
      const unsigned kd = wbase_s + stage * C::kCodeStageBytes;
      const unsigned vd = kd + C::kCodeTileBytes;
      const int c16 = lane % C::kCodeChunks, r16 = lane / C::kCodeChunks;
      const auto* k_codes = reinterpret_cast<const uint8_t*>(p.k_cache);
      const auto* v_codes = reinterpret_cast<const uint8_t*>(p.v_cache);
#pragma unroll
      for (int k = 0; k < C::kCodeCopies; ++k) {
        const int r = r16 + k * C::kCodeRowsPerCopy;
        const int slot = __shfl_sync(kFull, slot_reg, r);
        const bool valid = slot >= 0;
        const int64_t off = valid ? (int64_t{slot} * p.hk + kvh) * D + c16 * 16 : 0;
        const unsigned so = r * C::kCodeStride + c16 * 16;
        cp_async16_zfill(kd + so, k_codes + off, valid);
        cp_async16_zfill(vd + so, v_codes + off, valid);
      }
      const int64_t row = slot_reg >= 0 ? int64_t{slot_reg} * p.hk + kvh : 0;
      cp_async4_zfill(kd + 2 * C::kCodeTileBytes + lane * 4, (lane < kTcKeys ? p.k_scale : p.v_scale) + row,
                      slot_reg >= 0);
    } else {
      const unsigned kd = wbase_s + stage * C::kStageElems * 2;
      const unsigned vd = kd + C::kTileElems * 2;
#pragma unroll
      for (int k = 0; k < C::kCopies; ++k) {
        const int r = r0 + k * C::kRowsPerCopy;
        const int slot = __shfl_sync(kFull, slot_reg, r);
        const bool valid = slot >= 0;
        const int64_t off = valid ? (int64_t{slot} * p.hk + kvh) * D + cc * 8 : 0;
        const unsigned so = (r * C::kStride + cc * 8) * 2;
        cp_async16_zfill(kd + so, p.k_cache + off, valid);
        cp_async16_zfill(vd + so, p.v_cache + off, valid);
      }
    }
  };

  // PDL (pdl.cuh): the metadata and block tables above are the step's host upload, and every key but the
  // newest (ctx - 1, stored by the preceding qkv_prologue) was cached by earlier steps. So when none of
  // this warp's first kSt - 1 tiles holds key ctx - 1 (uniform per warp) their copies start before the
  // wait; q (the predecessor's output) is read after it.
  // (kPro: all of them; the new key's stale row is overwritten in shared memory below.)
  const int n_pro = min(my_tiles, kSt - 1);
  const bool early = kPro || n_pro == 0 ||
                     min(k_end, k_begin + (warp + (n_pro - 1) * kTcWarps + 1) * kTcKeys) - 1 < ctx - 1;
  auto issue_prologue = [&] {
#pragma unroll
    for (int s = 0; s < kSt - 1; ++s) {
      if (s < my_tiles) issue(slot_pro[s], s);
      cp_async_commit();
    }
  };
  if (early) issue_prologue();
  pdl_wait();
  pdl_trigger();
  if (!early) issue_prologue();

  if constexpr (kPro) {
    // The prologue: items 0 .. gcount - 1 are the CTA's q heads, then (owner only) the K and V heads of
    // the new key; a warp takes 32 / kLanes items per pass, all its lanes in every pass (shuffles).
    constexpr int kLanes = D / 8, kPerWarp = 32 / kLanes;
    const int items = gcount + (owns_new_key ? 2 : 0), hl = lane % kLanes;
    const int total = p.hq + 2 * p.hk;
    const uint4* qkv = reinterpret_cast<const uint4*>(p.qkv);
    __syncthreads();  // pro_cs is complete
    for (int i0 = warp * kPerWarp; i0 < items; i0 += kTcWarps * kPerWarp) {  // warp-uniform bound
      const int item = i0 + lane / kLanes;
      const bool active = item < items, is_q = item < gcount, is_k = item == gcount;
      const int64_t h = is_q ? head0 + item : is_k ? p.hq + kvh : p.hq + p.hk + kvh;
      const __nv_bfloat16* nw = is_q ? p.q_norm : is_k ? p.k_norm : nullptr;
      uint4 raw = make_uint4(0, 0, 0, 0), wraw = raw;
      if (active) {
        raw = qkv[(int64_t{t} * total + h) * kLanes + hl];
        if (nw != nullptr) wraw = reinterpret_cast<const uint4*>(nw)[hl];
      }
      const uint4 y = norm_rope_chunk<kLanes>(raw, wraw, nw != nullptr, p.eps, pro_cs, hl, p.rope_interleaved);
      if (active && is_q) {
        *reinterpret_cast<uint4*>(pro_q + item * (D + 8) + hl * 8) = y;
      } else if (active) {  // the new key's row: into shared memory and the cache
        const uint4 v = is_k ? y : raw;
        *reinterpret_cast<uint4*>(pro_kv + (is_k ? 0 : D) + hl * 8) = v;
        const int64_t off = (int64_t{p.slots[t]} * p.hk + kvh) * D + hl * 8;
        *reinterpret_cast<uint4*>(const_cast<__nv_bfloat16*>(is_k ? p.k_cache : p.v_cache) + off) = v;
      }
    }
    __syncthreads();
  }

  // Q fragments (rows gq and gq + 8 = heads g0 + row; rows >= gcount are zeros), straight from global q
  // [T, Hq, D] (kPro: from the prologue's rows in shared memory; kDca: the tile's rotation).
  uint32_t qf[C::kKSteps][4];
  auto load_q = [&](const __nv_bfloat16* q) {
    const uint32_t* q_lo = kPro ? reinterpret_cast<const uint32_t*>(pro_q + gq * (D + 8))
                                : reinterpret_cast<const uint32_t*>(q + (int64_t{t} * p.hq + head0 + gq) * D);
    const uint32_t* q_hi = kPro ? reinterpret_cast<const uint32_t*>(pro_q + (gq + 8) * (D + 8))
                                : reinterpret_cast<const uint32_t*>(q + (int64_t{t} * p.hq + head0 + gq + 8) * D);
    const bool lo_ok = gq < gcount, hi_ok = gq + 8 < gcount;
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
      qf[kk][0] = lo_ok ? q_lo[kk * 8 + tq] : 0u;
      qf[kk][1] = hi_ok ? q_hi[kk * 8 + tq] : 0u;
      qf[kk][2] = lo_ok ? q_lo[kk * 8 + 4 + tq] : 0u;
      qf[kk][3] = hi_ok ? q_hi[kk * 8 + 4 + tq] : 0u;
    }
  };
  // kFp8: f16 fragments in the code layout (see the tile loop): in k-step kk lane tq holds dims tq D / 4 + 4 kk + 0, 1
  // (a0 / a1) and + 2, 3 (a2 / a3). Row h is scaled by 2^e_h, which puts its max |q| into [2^14, 2^15) (so every
  // element above 2^-31 of the max is exact in f16); q_unscale[h] = 2^-e_h multiplies the row's scores.
  float q_unscale[2] = {1.0f, 1.0f};
  auto load_q_f16 = [&](const __nv_bfloat16* q) {
    const uint32_t* q_lo = reinterpret_cast<const uint32_t*>(q + (int64_t{t} * p.hq + head0 + gq) * D) + tq * (D / 8);
    const uint32_t* q_hi = reinterpret_cast<const uint32_t*>(q + (int64_t{t} * p.hq + head0 + gq + 8) * D) + tq * (D / 8);
    const bool lo_ok = gq < gcount, hi_ok = gq + 8 < gcount;
    float mx[2] = {0.0f, 0.0f};
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
      qf[kk][0] = lo_ok ? q_lo[2 * kk] : 0u;
      qf[kk][1] = hi_ok ? q_hi[2 * kk] : 0u;
      qf[kk][2] = lo_ok ? q_lo[2 * kk + 1] : 0u;
      qf[kk][3] = hi_ok ? q_hi[2 * kk + 1] : 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qf[kk][e]));
        mx[e & 1] = fmaxf(mx[e & 1], fmaxf(fabsf(f.x), fabsf(f.y)));
      }
    }
    float up[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float rmax = quad_max(mx[h]);
      const int e = rmax > 0.0f ? min(126, max(-126, 141 - (__float_as_int(rmax) >> 23))) : 0;  // 2^+-e normal
      up[h] = __int_as_float((127 + e) << 23);
      q_unscale[h] = __int_as_float((127 - e) << 23);
    }
#pragma unroll
    for (int kk = 0; kk < C::kKSteps; ++kk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qf[kk][e]));
        qf[kk][e] = pack_f16(f.x * up[e & 1], f.y * up[e & 1]);
      }
    }
  };
  int q_region = 0;  // kDca: the rotation qf holds (the query sits at position ctx - 1)
  if constexpr (kFp8) {
    load_q_f16(p.q);
  } else if constexpr (kDca) {
    q_region = dca_region(ctx - 1, (k_begin + warp * kTcKeys) / p.dca_chunk_len, p.dca_chunk_len);
    load_q(dca_queries(p, q_region));
  } else {
    load_q(p.q);
  }

  float o[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float vref[2] = {1.0f, 1.0f};  // kFp8: o holds the output / vref of its row (see the tile loop)
  const float sl2 = p.scale_log2;

  // ldmatrix lane addresses (offsets inside a stage): K as the col-major B of S = Q K^T (two n-tiles of
  // 8 keys per x4), V as the row-major B of O = P V (.trans; two n-tiles of 8 dims per x4).
  const unsigned k_off = ldsm_b_offset(lane, C::kStride) * 2;
  const unsigned v_off = (C::kTileElems + ldsm_bt_offset(lane, C::kStride)) * 2;

  const int last_key[2] = {k_end - 1, k_end - 1};  // both rows see the split's whole range

  // kFp8: one tile from its stage (codes, no dequantized copy): K and V fragments are loaded as codes and turned
  // into f16 in registers (fp8x2_to_f16x2: one cvt per 2 elements, exact), the MMAs run in f16, and the row scales
  // stay out of the tiles: S[:, j] = (Q K_codes^T)[:, j] x k_scale[j] x q_unscale (f32), and P[:, j] x v_scale[j]
  // goes into P V, normalised per row by vref (the tile's largest, at least the previous vref x alpha), so P's
  // f16 fragments lie in [0, 1] and o holds the output / vref (alpha carries the change of vref).
  // P's f16 rounding (relative 2^-12) would be the one coarse step: where the output cancels (V rows of 1e4 averaged
  // to ~10) it is ~3% of the result. With at most 8 heads in the unit (p_lo_rows) the MMA's padding rows 8..15
  // carry the remainder instead: A row gq + 8 = f16(P'[gq] - f16(P'[gq])), its accumulators o[][2..3] scaled like
  // row gq's and added to them before the merge, so P enters P V to ~2^-23. With 16 heads P is f16 alone.
  // Layouts (the dims are permuted, the keys not): for S, lane (gq, tq) loads key 8 n + gq's codes at dims
  // [tq D / 4, (tq + 1) D / 4), one word per k-step, its low half the k-step's b0 (k 2 tq, 2 tq + 1), the high half
  // b1 (k 2 tq + 8, + 9), which is why q's fragments follow the same dims. For P V, lane (gq, tq) loads keys
  // 2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9 at dims [gq D / 8, (gq + 1) D / 8): byte nt of those is the B column gq of
  // n-tile nt; so accumulator o[nt][c] (column 2 tq + c) is output dim (2 tq + c) D / 8 + nt.
  const bool p_lo_rows = gcount <= 8;  // kFp8: MMA rows 8..15 free for P's f16 remainder (see below)
  auto attend_fp8_tile = [&](const unsigned char* kt, int key0) {
    const unsigned char* vt = kt + C::kCodeTileBytes;
    const float* ksc = reinterpret_cast<const float*>(kt + 2 * C::kCodeTileBytes);  // [16] K, [16] V scales
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      uint32_t kc[C::kKSteps];
      const uint4* src = reinterpret_cast<const uint4*>(kt + (n * 8 + gq) * C::kCodeStride + tq * (D / 4));
#pragma unroll
      for (int w = 0; w < D / 64; ++w) {
        const uint4 v = src[w];
        kc[4 * w] = v.x;
        kc[4 * w + 1] = v.y;
        kc[4 * w + 2] = v.z;
        kc[4 * w + 3] = v.w;
      }
#pragma unroll
      for (int kk = 0; kk < C::kKSteps; ++kk)
        mma16816_f16(s[n], qf[kk], fp8x2_to_f16x2(kc[kk]), fp8x2_to_f16x2(kc[kk] >> 16));
      const float2 ks = *reinterpret_cast<const float2*>(ksc + n * 8 + 2 * tq);
      s[n][0] *= ks.x * q_unscale[0];
      s[n][1] *= ks.y * q_unscale[0];
      s[n][2] *= ks.x * q_unscale[1];
      s[n][3] *= ks.y * q_unscale[1];
    }
    if (key0 + kTcKeys > k_end) mask_scores(s, key0, tq, last_key);  // ragged end (zero-filled keys score 0)

    float alpha[2], pr[2][4];
    online_softmax_p(s, sl2, m, l, alpha, pr);
    float vmax[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const float2 vs = *reinterpret_cast<const float2*>(ksc + kTcKeys + n * 8 + 2 * tq);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pr[n][e] *= e & 1 ? vs.y : vs.x;
        vmax[e >> 1] = fmaxf(vmax[e >> 1], pr[n][e]);
      }
    }
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float ref = fmaxf(quad_max(vmax[h]), alpha[h] * vref[h]);
      const float r = ref > 0.0f ? ref : 1.0f;
      inv[h] = 1.0f / r;
      alpha[h] *= vref[h] * inv[h];
      vref[h] = r;
    }
    uint32_t pa[4];
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const float p0 = pr[n][0] * inv[0], p1 = pr[n][1] * inv[0];
      const __half2 hi = __floats2half2_rn(p0, p1);
      const float2 hf = __half22float2(hi);
      pa[2 * n] = *reinterpret_cast<const uint32_t*>(&hi);
      pa[2 * n + 1] = p_lo_rows ? pack_f16(p0 - hf.x, p1 - hf.y) : pack_f16(pr[n][2] * inv[1], pr[n][3] * inv[1]);
    }
    if (p_lo_rows) alpha[1] = alpha[0];  // o[][2..3] hold row gq's remainder terms

    constexpr int kW = D / 32;  // code words per key row and lane
    uint32_t va[4][kW];         // keys 2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const unsigned char* row = vt + (2 * tq + (r & 1) + (r >> 1) * 8) * C::kCodeStride + gq * (D / 8);
      if constexpr (kW == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(row);
        va[r][0] = v.x;
        va[r][1] = v.y;
        va[r][2] = v.z;
        va[r][3] = v.w;
      } else {
        static_assert(kW == 2, "D 64 or 128");
        const uint2 v = *reinterpret_cast<const uint2*>(row);
        va[r][0] = v.x;
        va[r][1] = v.y;
      }
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      // Byte j of word w (n-tile 4 w + j) of the key pairs (2 tq, 2 tq + 1) -> b0, (2 tq + 8, 2 tq + 9) -> b1.
      const uint32_t b0_01 = __byte_perm(va[0][w], va[1][w], 0x5140), b0_23 = __byte_perm(va[0][w], va[1][w], 0x7362);
      const uint32_t b1_01 = __byte_perm(va[2][w], va[3][w], 0x5140), b1_23 = __byte_perm(va[2][w], va[3][w], 0x7362);
      mma16816_f16(o[4 * w], pa, fp8x2_to_f16x2(b0_01), fp8x2_to_f16x2(b1_01));
      mma16816_f16(o[4 * w + 1], pa, fp8x2_to_f16x2(b0_01 >> 16), fp8x2_to_f16x2(b1_01 >> 16));
      mma16816_f16(o[4 * w + 2], pa, fp8x2_to_f16x2(b0_23), fp8x2_to_f16x2(b1_23));
      mma16816_f16(o[4 * w + 3], pa, fp8x2_to_f16x2(b0_23 >> 16), fp8x2_to_f16x2(b1_23 >> 16));
    }
  };
  int slot_next = slot_pro[kSt - 1];
  int stage = 0;
  for (int i = 0; i < my_tiles; ++i) {
    {
      const int ni = i + kSt - 1;  // refill the stage computed in the previous iteration
      int st_fill = stage + kSt - 1;
      if (st_fill >= kSt) st_fill -= kSt;
      if (ni < my_tiles) issue(slot_next, st_fill);
      cp_async_commit();
      slot_next = slot_of(ni + 1);  // consumed next iteration: latency hidden by this tile's math
    }
    cp_async_wait<kSt - 1>();
    __syncwarp();
    if constexpr (kFp8) {
      attend_fp8_tile(wbase + stage * C::kCodeStageBytes, k_begin + (warp + i * kTcWarps) * kTcKeys);
    } else {
      const unsigned sb = wbase_s + stage * C::kStageElems * 2;
      if constexpr (kPro) {
        // The new key's row in this tile: the prologue's K / V replace the stale copy from the cache.
        const int nk = ctx - 1 - (k_begin + (warp + i * kTcWarps) * kTcKeys);
        if (owns_new_key && nk >= 0 && nk < kTcKeys) {
          if (lane < 2 * C::kChunks) {
            const int is_v = lane / C::kChunks, c = lane % C::kChunks;
            const int e = stage * C::kStageElems + is_v * C::kTileElems + nk * C::kStride + c * 8;
            *reinterpret_cast<uint4*>(wbase + e * 2) = *reinterpret_cast<const uint4*>(pro_kv + is_v * D + c * 8);
          }
          __syncwarp();
        }
      }

      const int key0 = k_begin + (warp + i * kTcWarps) * kTcKeys;
      if constexpr (kDca) {  // a tile in another key region than the last: its rotation (warp-uniform)
        const int region = dca_region(ctx - 1, key0 / p.dca_chunk_len, p.dca_chunk_len);
        if (region != q_region) {
          q_region = region;
          load_q(dca_queries(p, region));
        }
      }

      // S = Q K^T: [16 rows x 16 keys], two n-tiles.
      float s[2][4];
  #pragma unroll
      for (int n = 0; n < 2; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  #pragma unroll
      for (int kk = 0; kk < C::kKSteps; ++kk) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4(sb + k_off + kk * 32, b0, b1, b2, b3);
        mma16816(s[0], qf[kk], b0, b1);
        mma16816(s[1], qf[kk], b2, b3);
      }
      if (key0 + kTcKeys > k_end) mask_scores(s, key0, tq, last_key);  // ragged end (zero-filled keys score 0)

      // Online softmax, base 2 (rows gq and gq + 8; a row's 16 scores live in the 4 lanes of a quad).
      float alpha[2];
      uint32_t pa[1][4];  // P: the A operand of the tile's one k-step
      online_softmax(s, sl2, m, l, alpha, pa);

      // O = O * alpha + P V: n-tiles of 8 dims, two per ldmatrix.trans.
  #pragma unroll
      for (int dp = 0; dp < C::kKSteps; ++dp) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(sb + v_off + dp * 32, b0, b1, b2, b3);
  #pragma unroll
        for (int h = 0; h < 2; ++h) {
          o[2 * dp + h][0] *= alpha[0];
          o[2 * dp + h][1] *= alpha[0];
          o[2 * dp + h][2] *= alpha[1];
          o[2 * dp + h][3] *= alpha[1];
        }
        mma16816(o[2 * dp], pa[0], b0, b1);
        mma16816(o[2 * dp + 1], pa[0], b2, b3);
      }
    }
    __syncwarp();  // every lane's loads of this stage are done before the stage is refilled
    stage = stage + 1 == kSt ? 0 : stage + 1;
  }

  // ---- Merge the 4 warps (their pipeline regions become [16][kMergeStride] o, [16] m, [16] l). ----
  cp_async_wait<0>();
  __syncthreads();
  {
    float* mine = reinterpret_cast<float*>(wbase);
    const float lq[2] = {quad_sum(l[0]), quad_sum(l[1])};
    if constexpr (kFp8) {  // o[nt][c] is dim (2 tq + c) D / 8 + nt, scaled by 1 / vref
      if (p_lo_rows) {  // row gq's P remainder terms (rows gq + 8 >= gcount are not merged)
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          o[nt][0] += o[nt][2];
          o[nt][1] += o[nt][3];
        }
      }
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          mine[gq * C::kMergeStride + (2 * tq + c) * (D / 8) + nt] = o[nt][c] * vref[0];
          mine[(gq + 8) * C::kMergeStride + (2 * tq + c) * (D / 8) + nt] = o[nt][2 + c] * vref[1];
        }
    } else {
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        *reinterpret_cast<float2*>(mine + gq * C::kMergeStride + d * 8 + 2 * tq) = make_float2(o[d][0], o[d][1]);
        *reinterpret_cast<float2*>(mine + (gq + 8) * C::kMergeStride + d * 8 + 2 * tq) = make_float2(o[d][2], o[d][3]);
      }
    }
    if (tq == 0) {
      mine[kTcRows * C::kMergeStride + gq] = m[0];
      mine[kTcRows * C::kMergeStride + gq + 8] = m[1];
      mine[kTcRows * C::kMergeStride + kTcRows + gq] = lq[0];
      mine[kTcRows * C::kMergeStride + kTcRows + gq + 8] = lq[1];
    }
  }
  __syncthreads();
  const int64_t part_base = (int64_t{seq} * p.hq + head0) * p.num_splits;  // + row * splits + split
  for (int e = tid; e < gcount * D; e += kTcThreads) {
    const int row = e / D, d = e % D;
    float mw[kTcWarps], mxw = -INFINITY;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      mw[w] = reinterpret_cast<const float*>(smem + w * C::kWarpBytes)[kTcRows * C::kMergeStride + row];
      mxw = fmaxf(mxw, mw[w]);
    }
    float lsum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      const float* src = reinterpret_cast<const float*>(smem + w * C::kWarpBytes);
      const float sc = mw[w] == -INFINITY ? 0.0f : ex2((mw[w] - mxw) * sl2);
      lsum += src[kTcRows * C::kMergeStride + kTcRows + row] * sc;
      acc += src[row * C::kMergeStride + d] * sc;
    }
    const float val = lsum > 0.0f ? acc / lsum : 0.0f;
    if (ns == 1) {
      p.out[(int64_t{t} * p.hq + head0 + row) * D + d] = __float2bfloat16_rn(val);
    } else if constexpr (kCluster) {
      float* cl = reinterpret_cast<float*>(smem + C::kClusterOff);  // [16][D] o, then [16] lse
      cl[row * D + d] = val;
      if (d == 0) cl[kTcRows * D + row] = lsum > 0.0f ? mxw * sl2 + log2f(lsum) : -INFINITY;
    } else {
      const int64_t part = part_base + int64_t{row} * p.num_splits + split;
      p.part_o[part * D + d] = val;
      if (d == 0) p.part_lse[part] = lsum > 0.0f ? mxw * sl2 + log2f(lsum) : -INFINITY;
    }
  }
  if (ns == 1) return;

  if constexpr (kCluster) {
    // ---- Cluster combine: CTA `split` (its cluster rank) merges elements split * 128 + tid, ... ----
    cluster_sync();  // every split's partial is in its CTA's shared memory
    const unsigned cl = smem_u32(smem + C::kClusterOff);
    for (int e = split * kTcThreads + tid; e < gcount * D; e += static_cast<int>(gridDim.z) * kTcThreads) {
      const int row = e / D;
      float lse[kTcMaxClusterSplits], po[kTcMaxClusterSplits], mxs = -INFINITY;
#pragma unroll
      for (int i = 0; i < kTcMaxClusterSplits; ++i) {  // all loads in flight together
        lse[i] = i < ns ? ld_cluster_f32(cl + (kTcRows * D + row) * 4, i) : -INFINITY;
        po[i] = i < ns ? ld_cluster_f32(cl + e * 4, i) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kTcMaxClusterSplits; ++i) mxs = fmaxf(mxs, lse[i]);
      float wsum = 0.0f, acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kTcMaxClusterSplits; ++i) {
        const float w = lse[i] == -INFINITY ? 0.0f : ex2(lse[i] - mxs);
        wsum += w;
        acc += w * po[i];
      }
      p.out[(int64_t{t} * p.hq + head0 + row) * D + e % D] = __float2bfloat16_rn(wsum > 0.0f ? acc / wsum : 0.0f);
    }
    cluster_sync();  // no CTA exits while the others still read its shared memory
    return;
  }

  // ---- Fused combine: the last CTA of this (seq, unit) to arrive merges the ns partials. ----
  __threadfence();  // this CTA's partials are visible device-wide before its arrival is counted
  __syncthreads();
  int* counter = p.split_counters + int64_t{seq} * gridDim.y + unit;
  if (tid == 0) {
    const int prev = atomicAdd(counter, 1);
    s_last = prev == ns - 1;
    if (s_last) *counter = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // The split weights 2^(lse_i - max) once per row (not per output element), in the now unused pipeline
  // shared memory: sw [16][kTcMaxSplits] weights, swsum [16] their sums. Then every element's ns partial
  // loads are independent, so they are in flight together.
  float* sw = reinterpret_cast<float*>(smem);
  float* swsum = sw + kTcRows * kTcMaxSplits;
  for (int e = tid; e < gcount * ns; e += kTcThreads)
    sw[(e / ns) * kTcMaxSplits + e % ns] = __ldcg(p.part_lse + part_base + int64_t{e / ns} * p.num_splits + e % ns);
  __syncthreads();
  if (tid < gcount) {
    float* w = sw + tid * kTcMaxSplits;
    float mxs = -INFINITY;
    for (int i = 0; i < ns; ++i) mxs = fmaxf(mxs, w[i]);
    float wsum = 0.0f;
    for (int i = 0; i < ns; ++i) {
      w[i] = w[i] == -INFINITY ? 0.0f : ex2(w[i] - mxs);
      wsum += w[i];
    }
    swsum[tid] = wsum;
  }
  __syncthreads();
  for (int e = tid; e < gcount * D; e += kTcThreads) {
    const int row = e / D, d = e % D;
    const float* po = p.part_o + (part_base + int64_t{row} * p.num_splits) * D + d;
    const float* w = sw + row * kTcMaxSplits;
    float acc = 0.0f;
#pragma unroll 8
    for (int i = 0; i < ns; ++i) acc += w[i] * __ldcg(po + int64_t{i} * D);
    const float wsum = swsum[row];
    p.out[(int64_t{t} * p.hq + head0 + row) * D + d] = __float2bfloat16_rn(wsum > 0.0f ? acc / wsum : 0.0f);
  }
}

template <int D, int NST, bool kCluster, bool kPro, bool kDca = false, bool kFp8 = false>
void set_tc_attributes() {
  static PerDeviceFlag attributes_set;
  once_per_current_device(attributes_set, [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_tc_kernel<D, NST, kCluster, kPro, kDca, kFp8>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(TcDec<D, NST>::kSmem)));
    if (kCluster)
      CUDA_CHECK(cudaFuncSetAttribute(decode_tc_kernel<D, NST, kCluster, kPro, kDca, kFp8>,
                                      cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  });
}

// Launch configuration of a decode grid whose gridDim.z split slots form one cluster, with the PDL
// attribute when `pdl`; `attr` holds the attributes (the caller's storage).
cudaLaunchConfig_t cluster_config(dim3 grid, size_t smem, cudaStream_t st, bool pdl, cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kTcThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = grid.z;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 2 : 1;
  return cfg;
}

template <int D, int NST, bool kCluster, bool kPro, bool kDca = false, bool kFp8 = false>
void launch_tc(const Params& p, int gc, ops::Stream s) {
  set_tc_attributes<D, NST, kCluster, kPro, kDca, kFp8>();
  const int gchunks = (p.g + gc - 1) / gc;
  const int max_splits = kCluster ? kTcMaxClusterSplits : kTcMaxSplits;
  NANOVLLM_CHECK(p.num_splits >= 1 && p.num_splits <= max_splits, "paged_attention (cuda): split count ",
                 p.num_splits, " not in [1, ", max_splits, "]");
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(p.hk * gchunks),
                  static_cast<unsigned>(p.num_splits));
  if constexpr (!kCluster) {
    launch_pdl(decode_tc_kernel<D, NST, false, kPro, kDca, kFp8>, grid, dim3(kTcThreads), TcDec<D, NST>::kSmem, s, p,
               gc, gchunks);
  } else {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t cfg =
        cluster_config(grid, TcDec<D, NST>::kSmem, stream_of(s), context_of(s).use_pdl(), attr);
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, decode_tc_kernel<D, NST, true, kPro, kDca, kFp8>, p, gc, gchunks));
  }
  CUDA_CHECK_LAUNCH();
}

// Whether clusters of kTcMaxClusterSplits CTAs of the D 128 kernel (the largest one) can be resident on
// `device` (sm_90+, and the occupancy query agrees).
bool cluster_fits(int device) {
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) return false;
  set_tc_attributes<128, 3, true, true>();
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg = cluster_config(dim3(1, 8, kTcMaxClusterSplits), TcDec<128, 3>::kSmem, nullptr,
                                                /*pdl=*/false, attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, decode_tc_kernel<128, 3, true, true>, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

// Opt-in shared memory per block of the current device (cached per device).
int smem_optin(int device) {
  static std::mutex mu;
  static int cached[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0 || device >= 64) device = 0;
  if (cached[device] == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&cached[device], cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  }
  return cached[device];
}

template <int D>
void launch_tc_for_device(const Params& p, int gc, bool cluster, bool prologue, ops::Stream st, bool dca) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const bool three = static_cast<size_t>(smem_optin(device)) >= TcDec<D, 3>::kSmem;
  if (p.k_scale != nullptr) {  // an fp8 cache: the prologue runs separately (paged_attention.cu), no DCA (engine)
    NANOVLLM_CHECK(!prologue && !dca, "paged_attention (cuda): an fp8 KV cache has no fused prologue or Dual Chunk "
                   "Attention decode");
    if (cluster) launch_tc<D, 3, true, false, false, true>(p, gc, st);
    else if (three) launch_tc<D, 3, false, false, false, true>(p, gc, st);
    else launch_tc<D, 2, false, false, false, true>(p, gc, st);
    return;
  }
  if (dca) {  // Dual Chunk Attention: no fused prologue (it makes one rotation)
    NANOVLLM_CHECK(!prologue, "paged_attention (cuda): Dual Chunk Attention has no fused prologue");
    if (cluster) launch_tc<D, 3, true, false, true>(p, gc, st);
    else if (three) launch_tc<D, 3, false, false, true>(p, gc, st);
    else launch_tc<D, 2, false, false, true>(p, gc, st);
    return;
  }
  // 3 stages (102 KB for D 128) where the device allows it (sm_80 / sm_90), else 2 (sm_86 / sm_89: 99 KB).
  // Clusters and the fused prologue only on sm_90, which has room for 3.
  if (prologue && cluster) launch_tc<D, 3, true, true>(p, gc, st);
  else if (prologue) launch_tc<D, 3, false, true>(p, gc, st);
  else if (cluster) launch_tc<D, 3, true, false>(p, gc, st);
  else if (three) launch_tc<D, 3, false, false>(p, gc, st);
  else launch_tc<D, 2, false, false>(p, gc, st);
}

}  // namespace

void launch_decode(const Params& p, int head_dim, cudaStream_t st, bool dca) {
  switch (head_dim) {
    case 64: dca ? launch_for_group<64, true>(p, st) : launch_for_group<64, false>(p, st); break;
    case 128: dca ? launch_for_group<128, true>(p, st) : launch_for_group<128, false>(p, st); break;
    case 256: dca ? launch_for_group<256, true>(p, st) : launch_for_group<256, false>(p, st); break;
    default: NANOVLLM_FAIL("paged_attention (cuda): head_dim ", head_dim, " not built (64, 128, 256)");
  }
}

bool decode_tc_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

int decode_tc_resident_ctas_per_sm(int head_dim) {
  NANOVLLM_CHECK(decode_tc_supported(head_dim), "paged_attention (cuda): no tensor-core decode for head_dim ", head_dim);
  static std::mutex mu;
  static int cached[64][2] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0 || device >= 64) device = 0;
  int& n = cached[device][head_dim == 128];
  if (n == 0) {
    const auto query = [&](auto kernel, size_t smem, auto set_attributes) {
      set_attributes();
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, smem));
    };
    const bool three = static_cast<size_t>(smem_optin(device)) >=
                       (head_dim == 128 ? TcDec<128, 3>::kSmem : TcDec<64, 3>::kSmem);  // as launch_tc_for_device
    if (head_dim == 128 && three) query(decode_tc_kernel<128, 3, false, false>, TcDec<128, 3>::kSmem, set_tc_attributes<128, 3, false, false>);
    else if (head_dim == 128) query(decode_tc_kernel<128, 2, false, false>, TcDec<128, 2>::kSmem, set_tc_attributes<128, 2, false, false>);
    else if (three) query(decode_tc_kernel<64, 3, false, false>, TcDec<64, 3>::kSmem, set_tc_attributes<64, 3, false, false>);
    else query(decode_tc_kernel<64, 2, false, false>, TcDec<64, 2>::kSmem, set_tc_attributes<64, 2, false, false>);
    n = std::max(n, 1);
  }
  return n;
}

bool decode_cluster_available(int device) {
  static std::mutex mu;
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0 || device >= 64) return false;
  if (cached[device] == 0) cached[device] = cluster_fits(device) ? 1 : 2;
  return cached[device] == 1;
}

void launch_decode_tc(const Params& p, int head_dim, int gc, bool cluster, bool prologue, ops::Stream st, bool dca) {
  NANOVLLM_CHECK(gc >= 1 && gc <= kTcRows, "paged_attention (cuda): decode head chunk ", gc, " not in [1, 16]");
  switch (head_dim) {
    case 64: launch_tc_for_device<64>(p, gc, cluster, prologue, st, dca); break;
    case 128: launch_tc_for_device<128>(p, gc, cluster, prologue, st, dca); break;
    default: NANOVLLM_FAIL("paged_attention (cuda): tensor-core decode for head_dim ", head_dim, " not built (64, 128)");
  }
}

void launch_combine(const Params& p, int head_dim, cudaStream_t st) {
  const unsigned grid = static_cast<unsigned>(int64_t{p.num_seqs} * p.hq);
  switch (head_dim) {
    case 64: combine_kernel<64><<<grid, 64, 0, st>>>(p); break;
    case 128: combine_kernel<128><<<grid, 128, 0, st>>>(p); break;
    case 256: combine_kernel<256><<<grid, 256, 0, st>>>(p); break;
    default: NANOVLLM_FAIL("paged_attention (cuda): head_dim ", head_dim, " not built (64, 128, 256)");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops::attn
