// Sparse decode on CUDA (contracts: kernels/sparse_ops.h). bf16 caches and metadata. Every kernel is
// launched with Programmatic Dependent Launch and follows pdl.cuh's protocol (the step's metadata before
// the wait, everything else after), so each launch overlaps its predecessor's tail inside the decode graph.
// - quest_update_pages: the last token of each block written in the step folds the block's keys written
//   in this step into the stored min/max (a thread per element of Hk x D): no ordering between tokens is
//   needed, and the result equals the CPU fold (min / max are exact).
// - quest_scores: on tensor cores for head_dim 64 / 128 / 256 and GQA groups of up to 8 (quest_scores_tc.cu);
//   otherwise (and with Dual Chunk Attention) the GQA group's queries in shared memory, fp32 sums; D / 8 lanes per
//   page with 16-byte loads for head_dim 64 / 128 / 256, a warp per page otherwise.
// - select_pages: a CTA per (sequence, KV head); a 4-pass radix select over the order-preserving bits
//   of the middle pages' scores (block histogram, warp 0 finds the digit) finds the threshold, then a block scan writes the chosen pages in
//   increasing order (ties: the earlier pages), after the sink pages and before the recent ones.
// - sparse_decode_attention: the selected keys' cache rows (slot x Hk + head) are gathered into the
//   scratch, and the dense decode attention (paged_attention) runs on a virtual batch of S x Hk one-head
//   sequences over the cache viewed as [NB BS Hk, 1, 1, D] blocks of one key: the tuned split-KV kernel
//   serves the sparse case, and reads nothing but the selected keys.
// - Dual Chunk Attention (q [3, S, Hq, D], docs/sparse_attention.md "With Dual Chunk Attention"): quest_scores
//   takes the three rotations into shared memory and bounds each page with the rotation of each region its
//   positions meet (one, or two for a page across a chunk start); sparse_decode_attention runs
//   dca_sparse_decode_kernel, a CTA per (sequence, KV head) whose warps walk the selected keys (straight from the
//   list and the block table), each scored with its region's rotation in one online softmax per query head.
#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>

#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/quest_scores_tc.h"

namespace nanovllm::cuda_ops {
namespace {

// ---- quest_update_pages ----
constexpr int kUpdateThreads = 128;

// Grid (token, chunks of kUpdateThreads elements of Hk x D). keys: k_cache [NB, BS, Hk, D];
// k_min/k_max [NB, Hk, D]. Only the last token of each block written in the step (-1 slots skipped)
// stores: it folds one element over the keys of that block written in this step (a sequence's tokens are
// consecutive in the step) into the stored min / max, which cover the block's earlier offsets, unless
// the block starts in this step. That is the CPU's fold, without ordering between the step's tokens (one
// writer per block), and a decode step reads one key row and the stored pair, not the whole block.
// An fp8 cache (k_scale set): keys are code x scale in f32 (row = slot x Hk + e / D), and the bf16 metadata is
// rounded outward (min down, max up), as the CPU's, so the page bound still holds.
__device__ __forceinline__ float quest_key(const void* k_cache, const float* k_scale, int64_t slot, int e, int hk_d,
                                           int D) {
  const int64_t i = slot * hk_d + e;
  if (k_scale == nullptr) return __bfloat162float(static_cast<const __nv_bfloat16*>(k_cache)[i]);
  return fp8_e4m3_value(static_cast<const uint8_t*>(k_cache)[i]) * k_scale[slot * (hk_d / D) + e / D];
}

__global__ void __launch_bounds__(kUpdateThreads)
    quest_update_kernel(__nv_bfloat16* __restrict__ k_min, __nv_bfloat16* __restrict__ k_max,
                        const void* __restrict__ k_cache, const float* __restrict__ k_scale,
                        const int32_t* __restrict__ slots, int num_tokens, int block_size, int hk_d, int D) {
  const int t = blockIdx.x;
  const int e = blockIdx.y * kUpdateThreads + threadIdx.x;
  const int slot = slots[t];
  if (slot < 0 || e >= hk_d) return;
  const int block = slot / block_size;
  for (int u = t + 1; u < num_tokens; ++u) {
    if (slots[u] < 0) continue;
    if (slots[u] / block_size == block) return;  // a later token of this step stores the block
    break;
  }
  pdl_wait();  // the step's keys and the stored metadata come from earlier kernels
  pdl_trigger();
  const int64_t first_slot = int64_t{block} * block_size;
  int earliest = slot % block_size;
  float lo = quest_key(k_cache, k_scale, first_slot + earliest, e, hk_d, D), hi = lo;
  for (int u = t - 1; u >= 0; --u) {
    if (slots[u] < 0) continue;
    if (slots[u] / block_size != block) break;
    earliest = slots[u] % block_size;
    const float k = quest_key(k_cache, k_scale, first_slot + earliest, e, hk_d, D);
    lo = fminf(lo, k);
    hi = fmaxf(hi, k);
  }
  const int64_t meta = int64_t{block} * hk_d + e;
  if (earliest > 0) {  // offsets before this step's keys: stored by an earlier step's last token
    lo = fminf(lo, __bfloat162float(k_min[meta]));
    hi = fmaxf(hi, __bfloat162float(k_max[meta]));
  }
  // min / max of bf16 values are bf16 values: the conversions are exact (fp8: outward).
  k_min[meta] = k_scale != nullptr ? __float2bfloat16_rd(lo) : __float2bfloat16_rn(lo);
  k_max[meta] = k_scale != nullptr ? __float2bfloat16_ru(hi) : __float2bfloat16_rn(hi);
}

// ---- quest_scores ----
constexpr int kScoreWarps = 8;
constexpr int kPagesPerCta = 128;  // 8 x 32K contexts, Hk 8: 1024 CTAs (block 16), 512 (block 32)

// The score kernels' prologue: waits for q and the metadata (PDL), then loads the GQA group of KV head h
// of sequence s into shared memory as fp32 (qs [G, D]). The caller synchronises before reading qs.
// With Dual Chunk Attention (rotations 3, rot_stride = S Hq D): qs [3, G, D], the three rotations.
__device__ __forceinline__ void load_group_queries(float* qs, const __nv_bfloat16* __restrict__ q, int s, int h,
                                                   int hq, int g_count, int d, int rotations = 1,
                                                   int64_t rot_stride = 0) {
  pdl_wait();  // q and the metadata come from the preceding kernels
  pdl_trigger();
  for (int r = 0; r < rotations; ++r)
    for (int e = threadIdx.x; e < g_count * d; e += blockDim.x)
      qs[r * g_count * d + e] = __bfloat162float(q[r * rot_stride + (int64_t{s} * hq + int64_t{h} * g_count) * d + e]);
}

// Dual Chunk Attention: the regions (dca_region order: 0 intra, 1 successive, 2 inter) page p's positions meet
// for the query at position qpos: [r_lo, r_hi] (regions grow inward with the position).
__device__ __forceinline__ void page_regions(int p, int block_size, int ctx, int chunk_len, int& r_lo, int& r_hi) {
  const int qc = (ctx - 1) / chunk_len;
  const auto region = [&](int pos) { const int c = pos / chunk_len; return c >= qc ? 0 : c == qc - 1 ? 1 : 2; };
  r_lo = region(min((p + 1) * block_size, ctx) - 1);
  r_hi = region(p * block_size);
}

// Grid (S x Hk, page chunks of kPagesPerCta); q [S, Hq, D] (DCA, chunk_len > 0: [3, S, Hq, D]); scores [S, Hk, MP].
__global__ void __launch_bounds__(kScoreWarps * 32)
    quest_scores_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ q,
                        const __nv_bfloat16* __restrict__ k_min, const __nv_bfloat16* __restrict__ k_max,
                        const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens,
                        int hq, int hk, int d, int max_pages, int max_blocks, int block_size, int chunk_len,
                        int64_t rot_stride) {
  extern __shared__ float qs[];  // [rotations, G, D]
  const int item = blockIdx.x, s = item / hk, h = item % hk, g_count = hq / hk;
  const int ctx = context_lens[s];
  const int pages = (ctx + block_size - 1) / block_size;
  load_group_queries(qs, q, s, h, hq, g_count, d, chunk_len > 0 ? 3 : 1, rot_stride);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p_end = min(max_pages, (blockIdx.y + 1) * kPagesPerCta);
  for (int p = blockIdx.y * kPagesPerCta + warp; p < p_end; p += kScoreWarps) {
    float best = -INFINITY;
    if (p < pages) {
      const int64_t meta = (int64_t{block_tables[int64_t{s} * max_blocks + p]} * hk + h) * d;
      int r_lo = 0, r_hi = 0;
      if (chunk_len > 0) page_regions(p, block_size, ctx, chunk_len, r_lo, r_hi);
      for (int rg = r_lo * g_count; rg < (r_hi + 1) * g_count; ++rg) {
        float bound = 0.0f;
        for (int e = lane; e < d; e += 32) {
          const float qv = qs[rg * d + e];
          bound += fmaxf(qv * __bfloat162float(k_min[meta + e]), qv * __bfloat162float(k_max[meta + e]));
        }
        best = fmaxf(best, warp_sum(bound));
      }
    }
    if (lane == 0) scores[int64_t{item} * max_pages + p] = best;
  }
}

// The same for head_dim D = 8 L with L a power of two <= 32: a group of L lanes scores one page, each lane
// 8 dims through 16-byte loads of k_min / k_max held in registers across the group's query heads, reduced
// by L-lane shuffles (the generic kernel re-reads the metadata and reduces over 32 lanes per query head).
// A lane group takes kScoreUnroll pages at once: their block-table reads, then all their metadata loads,
// are issued before any is used. H200, 8 x 32K contexts, Hk 8, D 128, block 16: 42 us one page at a time,
// 36 us 4 at a time (with the select + FMA below and 128 pages per CTA); a CTA per sequence scoring all KV
// heads of a page from one contiguous 4 KB metadata read was slower (45 us). The kernel issues ~11M warp
// instructions for 131K (page, head) pairs: it is as much issue-bound as bandwidth-bound, and latency-bound
// at low occupancy. 2 at a time: 60 registers instead of 80, so 4 CTAs per SM instead of 3 and a 128K
// context's 512 CTAs fit one wave (ncu, H200: 27.9 -> 23.0 us per layer of one 128K sequence; 20.9 -> 18.0
// us for 8 x 32K with pages of 32; docs/experiments.md, "`quest_scores_vec_kernel` capped at 4 CTAs per SM").
constexpr int kScoreUnroll = 2;

// kDca: Dual Chunk Attention (q [3, S, Hq, D], qs [3, G, D]; a page's bound is the max over the rotations of the
// regions it meets).
template <int L, bool kDca = false>
__global__ void __launch_bounds__(kScoreWarps * 32)
    quest_scores_vec_kernel(float* __restrict__ scores, const __nv_bfloat16* __restrict__ q,
                            const __nv_bfloat16* __restrict__ k_min, const __nv_bfloat16* __restrict__ k_max,
                            const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens, int hq,
                            int hk, int max_pages, int max_blocks, int block_size, int chunk_len, int64_t rot_stride) {
  constexpr int D = L * 8, kGroups = 32 / L;      // pages per warp at a time
  constexpr int kStride = kScoreWarps * kGroups;  // pages per CTA at a time
  extern __shared__ float qs[];                   // [rotations, G, D]
  const int item = blockIdx.x, s = item / hk, h = item % hk, g_count = hq / hk;
  const int ctx = context_lens[s];
  const int pages = (ctx + block_size - 1) / block_size;
  load_group_queries(qs, q, s, h, hq, g_count, D, kDca ? 3 : 1, rot_stride);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = lane / L, sub = lane % L;
  const int p_end = min(max_pages, (blockIdx.y + 1) * kPagesPerCta);
  const int p_live = min(pages, p_end);
  __syncthreads();
  // warp_base is uniform over the warp, so every lane stays in the loop (the shuffles need the whole warp).
  for (int warp_base = blockIdx.y * kPagesPerCta + warp * kGroups; warp_base < p_end;
       warp_base += kScoreUnroll * kStride) {
    const int base = warp_base + group;
    int64_t meta[kScoreUnroll];
#pragma unroll
    for (int u = 0; u < kScoreUnroll; ++u) {
      const int p = base + u * kStride;
      meta[u] = p < p_live ? (int64_t{block_tables[int64_t{s} * max_blocks + p]} * hk + h) * D + sub * 8 : -1;
    }
    uint4 raw_lo[kScoreUnroll], raw_hi[kScoreUnroll];
#pragma unroll
    for (int u = 0; u < kScoreUnroll; ++u) {
      raw_lo[u] = raw_hi[u] = make_uint4(0, 0, 0, 0);
      if (meta[u] >= 0) {
        raw_lo[u] = *reinterpret_cast<const uint4*>(k_min + meta[u]);
        raw_hi[u] = *reinterpret_cast<const uint4*>(k_max + meta[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kScoreUnroll; ++u) {
      float lo[8], hi[8];
      bf16x8_to_f32(raw_lo[u], lo);
      bf16x8_to_f32(raw_hi[u], hi);
      float best = -INFINITY;
      // DCA: this lane group's page meets regions [r_lo, r_hi]; the loop runs over the warp's union of them (the
      // shuffles need every lane) and a group keeps only its own regions' bounds.
      int r_lo = 0, r_hi = 0, w_lo = 0, w_hi = 0;
      if constexpr (kDca) {
        page_regions(min(base + u * kStride, max(pages - 1, 0)), block_size, ctx, chunk_len, r_lo, r_hi);
        w_lo = __reduce_min_sync(0xffffffffu, r_lo);
        w_hi = __reduce_max_sync(0xffffffffu, r_hi);
      }
      for (int rg = w_lo * g_count; rg < (w_hi + 1) * g_count; ++rg) {
        const float* qv = qs + rg * D + sub * 8;
        float bound = 0.0f;
#pragma unroll
        // max(q lo, q hi) = q x (q >= 0 ? hi : lo) since lo <= hi: one select and one FMA per dim.
        for (int i = 0; i < 8; ++i) bound = fmaf(qv[i], qv[i] >= 0.0f ? hi[i] : lo[i], bound);
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) bound += __shfl_xor_sync(0xffffffffu, bound, o);
        if (!kDca || (rg / g_count >= r_lo && rg / g_count <= r_hi)) best = fmaxf(best, bound);
      }
      const int p = base + u * kStride;
      if (p < p_end && sub == 0) scores[int64_t{item} * max_pages + p] = p < pages ? best : -INFINITY;
    }
  }
}

// ---- select_pages ----
// Threads per CTA (>= 32: warp 0 scans the histogram): 256 for batches; 1024 when there are few (sequence,
// KV head) items, which leave most SMs idle (H200, one 128K sequence, Hk 8, 8192 pages: 28.6 us at 256).
constexpr int kSelectThreads = 256;
constexpr int kSelectThreadsFew = 1024;

// Float -> uint32 with the same order (negatives flipped entirely, positives get the sign bit).
__device__ __forceinline__ uint32_t order_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block per (sequence, KV head) of kThreads. scores [S, Hk, MP] f32, selected [S, Hk, K] i32.
template <int kSelectThreads>
__global__ void __launch_bounds__(kSelectThreads)
    select_pages_kernel(int32_t* __restrict__ selected, const float* __restrict__ scores,
                        const int32_t* __restrict__ context_lens, int hk, int max_pages, int budget,
                        int block_size, int sink, int recent) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ uint32_t prefix_s;
  __shared__ int need_s;
  const int item = blockIdx.x, tid = threadIdx.x;
  const int pages = (context_lens[item / hk] + block_size - 1) / block_size;
  pdl_wait();  // the scores come from the preceding kernel; the list is read by the next ones
  pdl_trigger();
  int32_t* list = selected + int64_t{item} * budget;
  if (pages <= budget) {
    for (int i = tid; i < budget; i += kSelectThreads) list[i] = i < pages ? i : -1;
    return;
  }
  const float* row = scores + int64_t{item} * max_pages;
  const int lo = sink, hi = pages - recent;  // the middle pages compete
  const int take = budget - sink - recent;
  // Radix select, most significant byte first: the take-th largest key's bits.
  uint32_t prefix = 0;
  int need = take;  // how many of the keys matching the prefix so far are still to be taken from the top
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kSelectThreads) hist[i] = 0;
    __syncthreads();
    const uint32_t mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for (int p = lo + tid; p < hi; p += kSelectThreads) {
      const uint32_t b = order_bits(row[p]);
      if ((b & mask) == prefix) atomicAdd(&hist[(b >> shift) & 0xff], 1);
    }
    __syncthreads();
    if (tid < 32) {  // warp 0 finds the digit: lane l counts bins 255 - 8 l ... 248 - 8 l (from the top)
      int cnt[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += (cnt[i] = hist[255 - 8 * tid - i]);
      int incl = sum;  // keys in this lane's bins and above
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (tid >= o) incl += v;
      }
      int acc = incl - sum;
      if (acc < need && need <= incl) {  // exactly one lane: the need-th largest key is in its bins
        int i = 0;
        for (; i < 7 && acc + cnt[i] < need; ++i) acc += cnt[i];
        prefix_s = prefix | (uint32_t(255 - 8 * tid - i) << shift);
        need_s = need - acc;
      }
    }
    __syncthreads();
    prefix = prefix_s;
    need = need_s;
    __syncthreads();
  }
  // prefix = the threshold key; `need` keys equal to it are taken, the earliest first. Each thread owns a
  // contiguous run of the middle pages, so two block scans (equal keys before the run, chosen pages before
  // the run) place every chosen page in increasing order (a scan pair per 256-page chunk took 12.8 us
  // instead of 10.6 on 64 x 2048 scores, H200).
  for (int i = tid; i < sink; i += kSelectThreads) list[i] = i;
  const int n = hi - lo, per = (n + kSelectThreads - 1) / kSelectThreads;
  const int r0 = lo + min(n, tid * per), r1 = lo + min(n, (tid + 1) * per);
  int eq = 0;
  for (int p = r0; p < r1; ++p) eq += order_bits(row[p]) == prefix;
  int eq_before;
  Scan(scan_tmp).ExclusiveSum(eq, eq_before);
  __syncthreads();  // scan_tmp is reused
  int chosen = 0;
  for (int p = r0, seen = eq_before; p < r1; ++p) {
    const uint32_t b = order_bits(row[p]);
    chosen += b > prefix || (b == prefix && seen++ < need);
  }
  int out;
  Scan(scan_tmp).ExclusiveSum(chosen, out);
  out += sink;
  for (int p = r0, seen = eq_before; p < r1; ++p) {
    const uint32_t b = order_bits(row[p]);
    if (b > prefix || (b == prefix && seen++ < need)) list[out++] = p;
  }
  for (int i = tid; i < recent; i += kSelectThreads) list[sink + take + i] = pages - recent + i;
}

// ---- sparse_decode_attention: gather the selected keys' rows ----
constexpr int kGatherThreads = 256;

// Grid (S x Hk, chunks of kGatherThreads list entries x offsets). rows [S Hk, K BS]; counts [S Hk];
// cu [S Hk + 1] = 0, 1, 2, ... A thread per (list entry j, offset o): listed pages are whole except the
// context's last page, which (the highest page) comes last, so key j BS + o of the item is offset o of
// page list[j] and every entry is independent (a loop over the list costs a dependent load per page:
// the sparse attention took 80 us instead of 42 for 8 x 8 items x 128 pages on an H200).
__global__ void __launch_bounds__(kGatherThreads)
    gather_key_rows_kernel(int32_t* __restrict__ rows, int32_t* __restrict__ counts, int32_t* __restrict__ cu,
                           const int32_t* __restrict__ selected, const int32_t* __restrict__ block_tables,
                           const int32_t* __restrict__ context_lens, int hk, int budget, int block_size,
                           int max_blocks, int num_items) {
  const int item = blockIdx.x, s = item / hk, h = item % hk;
  const int e = blockIdx.y * kGatherThreads + threadIdx.x;
  if (e >= budget * block_size) return;
  const int j = e / block_size, o = e % block_size;
  // No early trigger: the decode kernel after this one reads its metadata (these rows, counts and cu)
  // before its own wait, so it may only start once this grid is complete.
  pdl_wait();  // the selection comes from the preceding kernel
  const int32_t* list = selected + int64_t{item} * budget;
  const int page = list[j];
  if (e == 0) {
    cu[item] = item;
    if (item == num_items - 1) cu[num_items] = num_items;
    if (page < 0) counts[item] = 0;  // an empty list (a padding row of a graph batch)
  }
  if (page < 0) return;  // past the list's end
  const int ctx = context_lens[s];
  const int len = min(block_size, ctx - page * block_size);
  const int64_t block = page < max_blocks ? block_tables[int64_t{s} * max_blocks + page] : -1;
  // Never invalid (selection lists pages of the context, the engine maps them); if it were, read key
  // row h (block 0, offset 0) rather than anything outside the cache.
  const bool valid = o < len && block >= 0;
  rows[int64_t{item} * budget * block_size + e] = valid ? static_cast<int32_t>((block * block_size + o) * hk + h) : h;
  if (o == 0 && (j + 1 == budget || list[j + 1] < 0)) {  // the last listed page: the item's key count
    counts[item] = j * block_size + max(0, len);
  }
}

}  // namespace

void quest_update_pages(TensorView k_min, TensorView k_max, const KvCacheTensor& k_cache, TensorView slot_mapping,
                        ops::Stream s) {
  NANOVLLM_CHECK((k_cache.dtype() == DType::kBF16 || k_cache.fp8()) && k_min.dtype() == DType::kBF16,
                 "quest_update_pages (cuda): the KV cache must be BF16 or fp8, the page metadata BF16");
  const int T = static_cast<int>(slot_mapping.dim(0));
  if (T == 0) return;
  const int hk_d = static_cast<int>(k_cache.dim(2) * k_cache.dim(3));
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>((hk_d + kUpdateThreads - 1) / kUpdateThreads));
  launch_pdl(quest_update_kernel, grid, dim3(kUpdateThreads), 0, s, k_min.data_as<__nv_bfloat16>(),
             k_max.data_as<__nv_bfloat16>(), k_cache.data(), k_cache.fp8() ? k_cache.scale.data_as<const float>() : nullptr,
             slot_mapping.data_as<const int32_t>(), T, static_cast<int>(k_cache.dim(1)), hk_d,
             static_cast<int>(k_cache.dim(3)));
}

void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, const ops::DualChunkParams* dca, ops::Stream s) {
  NANOVLLM_CHECK(q.dtype() == DType::kBF16 && k_min.dtype() == DType::kBF16,
                 "quest_scores (cuda): q and the page metadata must be BF16");
  if (dca == nullptr && quest_scores_tensor_cores(scores, q, k_min, k_max, block_tables, context_lens, block_size, s))
    return;
  const int R = dca ? 3 : 1;  // query rotations: q [S, Hq, D], or [3, S, Hq, D] with DCA
  const int64_t S = q.dim(R == 3 ? 1 : 0), Hq = q.dim(R == 3 ? 2 : 1), D = q.dim(R == 3 ? 3 : 2);
  const int64_t Hk = k_min.dim(1), MP = scores.dim(2);
  const int chunk_len = dca ? static_cast<int>(dca->chunk_len) : 0;
  const int64_t rot_stride = S * Hq * D;
  if (S == 0 || MP == 0) return;
  const auto* kmin = k_min.data_as<const __nv_bfloat16>();
  const auto* kmax = k_max.data_as<const __nv_bfloat16>();
  const int hq = static_cast<int>(Hq), hk = static_cast<int>(Hk), mp = static_cast<int>(MP);
  const int mb = static_cast<int>(block_tables.dim(1)), bs = static_cast<int>(block_size);
  const dim3 grid(static_cast<unsigned>(S * Hk), static_cast<unsigned>((MP + kPagesPerCta - 1) / kPagesPerCta));
  const size_t smem = static_cast<size_t>(R * Hq / Hk * D) * sizeof(float);
  const auto vec = [&](auto kernel) {
    launch_pdl(kernel, grid, dim3(kScoreWarps * 32), smem, s, scores.data_as<float>(), q.data_as<const __nv_bfloat16>(),
               kmin, kmax, block_tables.data_as<const int32_t>(), context_lens.data_as<const int32_t>(), hq, hk, mp,
               mb, bs, chunk_len, rot_stride);
  };
  if (D == 64) return dca ? vec(quest_scores_vec_kernel<8, true>) : vec(quest_scores_vec_kernel<8>);
  if (D == 128) return dca ? vec(quest_scores_vec_kernel<16, true>) : vec(quest_scores_vec_kernel<16>);
  if (D == 256) return dca ? vec(quest_scores_vec_kernel<32, true>) : vec(quest_scores_vec_kernel<32>);
  launch_pdl(quest_scores_kernel, grid, dim3(kScoreWarps * 32), smem, s, scores.data_as<float>(),
             q.data_as<const __nv_bfloat16>(), kmin, kmax, block_tables.data_as<const int32_t>(),
             context_lens.data_as<const int32_t>(), hq, hk, static_cast<int>(D), mp, mb, bs, chunk_len, rot_stride);
}

void select_pages(TensorView selected, TensorView scores, TensorView context_lens, int64_t block_size,
                  int64_t sink_pages, int64_t recent_pages, ops::Stream s) {
  const int64_t S = scores.dim(0), Hk = scores.dim(1);
  if (S == 0) return;
  const auto launch = [&](auto kernel, int threads) {
    launch_pdl(kernel, dim3(static_cast<unsigned>(S * Hk)), dim3(threads), 0, s, selected.data_as<int32_t>(),
               scores.data_as<const float>(), context_lens.data_as<const int32_t>(), static_cast<int>(Hk),
               static_cast<int>(scores.dim(2)), static_cast<int>(selected.dim(2)), static_cast<int>(block_size),
               static_cast<int>(sink_pages), static_cast<int>(recent_pages));
  };
  const bool few = S * Hk * 4 <= context_of(s).sm_count();
  if (few) {
    launch(select_pages_kernel<kSelectThreadsFew>, kSelectThreadsFew);
  } else {
    launch(select_pages_kernel<kSelectThreads>, kSelectThreads);
  }
}

void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                             const KvCacheTensor& v_cache, TensorView block_tables, TensorView context_lens,
                             TensorView selected, float scale, TensorView scratch, const ops::DualChunkParams* dca,
                             ops::Stream s) {
  if (dca != nullptr) {
    NANOVLLM_CHECK(!k_cache.fp8(), "sparse_decode_attention (cuda, Dual Chunk Attention): the kernel reads a bf16 KV "
                   "cache, not fp8 (Dual Chunk Attention runs with the model's KV cache dtype only)");
    return dual_chunk_sparse_decode_attention(out, q, k_cache, v_cache, block_tables, context_lens, selected, *dca,
                                              scale, s);
  }
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t NB = k_cache.dim(0), BS = k_cache.dim(1), Hk = k_cache.dim(2), K = selected.dim(2);
  if (S == 0) return;
  const int64_t items = S * Hk, keys = K * BS;
  int32_t* rows = scratch.data_as<int32_t>();  // [S Hk, K BS]
  int32_t* counts = rows + items * keys;       // [S Hk]
  int32_t* cu = counts + items;                // [S Hk + 1]
  const dim3 gather_grid(static_cast<unsigned>(items), static_cast<unsigned>((keys + kGatherThreads - 1) / kGatherThreads));
  launch_pdl(gather_key_rows_kernel, gather_grid, dim3(kGatherThreads), 0, s, rows, counts, cu,
             selected.data_as<const int32_t>(), block_tables.data_as<const int32_t>(),
             context_lens.data_as<const int32_t>(), static_cast<int>(Hk), static_cast<int>(K), static_cast<int>(BS),
             static_cast<int>(block_tables.dim(1)), static_cast<int>(items));
  // The virtual batch: sequence (s, h) has one query row of G heads and counts[s, h] keys, block size 1.
  const Device dev = q.device();
  AttentionMetadata meta;
  meta.num_seqs = items;
  meta.num_tokens = items;
  meta.max_query_len = 1;
  meta.max_context_len = keys;
  meta.cu_seqlens_q = TensorView(cu, DType::kI32, Shape{items + 1}, dev);
  meta.context_lens = TensorView(counts, DType::kI32, Shape{items}, dev);
  meta.block_tables = TensorView(rows, DType::kI32, Shape{items, keys}, dev);
  meta.block_size = 1;
  meta.num_leading_decodes = items;
  meta.decode_single_wave = true;
  const Shape rows_shape{NB * BS * Hk, 1, 1, D};
  cuda_ops::paged_attention(out.reshape({items, Hq / Hk, D}), q.reshape({items, Hq / Hk, D}),
                            k_cache.reshape(rows_shape), v_cache.reshape(rows_shape), meta, scale, s);
}

}  // namespace nanovllm::cuda_ops
