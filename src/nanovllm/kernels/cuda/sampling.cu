// GPU sampler: one CTA of 1024 threads per row (after the chunk pass, sampling_chunk_pass.cu, when there
// is scratch: then only for rows with filters, penalties or top-K logprobs). See sampling.h for the
// contract and engine/sampler.cpp for the semantics replicated here.
//
// How each CPU step maps onto passes over the row (fp32, float4 loads when the row is 16-byte aligned):
//  * raw pass: online log-sum-exp (for logprobs), max and argmax (lowest id on ties).
//  * top-K logprobs: count radix select of the K-th largest raw value (3 digit levels of 11/11/10 bits on
//    the order-preserving uint32 of the float, warp-aggregated shared-memory histograms), the ties at
//    it resolved in id order, then a gather of the <= 20 winners and a tiny sort.
//  * penalties: applied in place to the listed ids (raw values saved, restored at the end), then one
//    more max/argmax pass.
//  * top-k: the same count radix select on x / T over finite values; keep x >= kth (ties kept).
//  * top-p: radix search on the same keys weighted by fixed-point mass q = floor(exp(x - m) * 2^s)
//    (exact integer sums, order independent): the pivot t is the largest value with mass(x >= t) >=
//    top_p * total; all x > t are kept, and of the ties at t the first j in id order, where j is the
//    number of j' >= 0 with mass(x > t) + j' q_t < target — exactly the CPU's sorted cumulative rule.
//  * min-p: prob >= min_p (the kept maximum always has prob exp(0) = 1).
//  * draw: fp64 weights exp(x - m) of the kept ids; per-warp contiguous id chunks are summed, the chunk
//    holding u * kept_mass is found, and its warp walks it with a warp scan: the first id whose
//    inclusive cumulative mass exceeds the draw (the CPU's `u < cum` in id order).
#include "nanovllm/kernels/cuda/sampling.h"

#include <algorithm>
#include <cstdint>

#include "nanovllm/core/error.h"
#include "nanovllm/core/rng.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/sampling_device.cuh"

namespace nanovllm::cuda_ops {
namespace {

using namespace sampling_detail;  // NOLINT(google-build-using-namespace): the sampler's shared device pieces

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kNoDigit = 0xffffffffu;
constexpr int kMaxBins = 2048;
constexpr int kLevels = 3;
__host__ __device__ constexpr int level_shift(int l) { return l == 0 ? 21 : (l == 1 ? 10 : 0); }
__host__ __device__ constexpr int level_width(int l) { return l == 2 ? 10 : 11; }
constexpr int64_t kNoCut = INT64_MAX;
constexpr int kMaxSegs = 64;  // find_crossing: segment sums kept per warp

using u64 = unsigned long long;

// Loads in flight per thread: one CTA streams a whole row, so a pass is bound by how many bytes it keeps
// in flight (one float4 per thread: ~37 dependent round trips over a 151,936-logit row).
constexpr int kPrefetch = 4;

// Calls f(id, v) for every element of the row, groups of 4 strided over the block (coalesced). Each
// thread visits its groups in the same order as a one-group-at-a-time loop; only the loads run ahead.
template <class F>
__device__ __forceinline__ void for_each_elem(const RowRef& r, F&& f) {
  const int64_t ngroups = (r.n + 3) / 4;
  for (int64_t g0 = threadIdx.x; g0 < ngroups; g0 += int64_t{kThreads} * kPrefetch) {
    float v[kPrefetch][4];
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) load_group(r, 4 * (g0 + int64_t{k} * kThreads), v[k]);
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) {
      const int64_t g = g0 + int64_t{k} * kThreads;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (4 * g + j < r.n) f(4 * g + j, v[k][j]);
    }
  }
}

struct Shared {
  uint32_t cnt[kMaxBins];  // radix histogram: counts
  u64 mass[kMaxBins];      // radix histogram: fixed-point mass
  // block reductions / broadcasts
  float red_m[kWarps], red_s[kWarps], red_bv[kWarps];
  int64_t red_bi[kWarps];
  double wsum[kWarps];
  int64_t wlast[kWarps];
  double seg[kWarps][kMaxSegs];  // find_crossing: each warp's segment sums, in id order
  uint32_t b_digit, b_cnt_gt, b_cnt_eq;
  u64 b_mass_gt, b_mass_eq;
  double b_need;
  int b_found;
  int b_warp, b_seg;
  double b_cum, b_thr;
  int64_t b_result, b_last;
  // top-K logprob gather
  int ntop;
  float top_v[kMaxSampleLogprobs];
  int64_t top_id[kMaxSampleLogprobs];
  double exp2_tbl[64];  // kExp2Table
  // row results
  float lse, maxv;
  int64_t argmax;
};

// ---- max / argmax (+ optional online log-sum-exp) over the row --------------------------------------

// One logit into a running (max, argmax) and, when kLse, online log-sum-exp (lm, ls) over finite values.
template <bool kLse>
__device__ __forceinline__ void add_stat(float& bv, int64_t& bi, float& lm, float& ls, float v, int64_t id) {
  argmax_merge(bv, bi, v, id);
  if (kLse && v != neg_inf()) {
    if (v > lm) { ls = ls * expf(lm - v) + 1.0f; lm = v; }
    else ls += expf(v - lm);
  }
}

template <bool kLse>
__device__ void reduce_stats(float bv, int64_t bi, float lm, float ls, Shared& sh);

// Sets sh.maxv / sh.argmax (lowest id among equal maxima), and sh.lse when kLse.
template <bool kLse>
__device__ void max_pass(const RowRef& r, Shared& sh) {
  float lm = neg_inf(), ls = 0.0f, bv = neg_inf();
  int64_t bi = INT64_MAX;
  for_each_elem(r, [&](int64_t id, float v) { add_stat<kLse>(bv, bi, lm, ls, v, id); });
  reduce_stats<kLse>(bv, bi, lm, ls, sh);
}

// Block-wide merge of every thread's (max, argmax, lse max, lse sum) into sh.maxv / sh.argmax / sh.lse.
template <bool kLse>
__device__ void reduce_stats(float bv, int64_t bi, float lm, float ls, Shared& sh) {
  warp_reduce_stats<kLse>(bv, bi, lm, ls);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { sh.red_bv[warp] = bv; sh.red_bi[warp] = bi; sh.red_m[warp] = lm; sh.red_s[warp] = ls; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      argmax_merge(bv, bi, sh.red_bv[w], sh.red_bi[w]);
      if (kLse) lse_merge(lm, ls, sh.red_m[w], sh.red_s[w]);
    }
    sh.maxv = bv;
    sh.argmax = bi;
    if (kLse) sh.lse = lm == neg_inf() ? neg_inf() : lm + logf(ls);
  }
  __syncthreads();
}

// ---- radix search ---------------------------------------------------------------------------------

struct RadixResult {
  bool found;
  uint32_t key;       // the pivot key
  uint32_t cnt_gt;    // elements with key > pivot
  uint32_t cnt_eq;    // elements with key == pivot
  u64 mass_gt, mass_eq;
  double need;        // the mass target (kMass)
};

// elem(id, v, key&) -> bool: whether the element takes part, and its key; mass(v) -> its weight q
// (q <= 2^46; evaluated only for elements inside the current prefix). Finds the largest key K with W(key >= K) >= need, W = count (need = need_count) or
// mass (need = top_p * total mass). found = false when the total falls short of need.
template <bool kMass, class Elem, class Mass>
__device__ RadixResult radix_search(const RowRef& r, Elem&& elem, Mass&& mass, uint32_t need_count,
                                    float top_p, Shared& sh) {
  const int lane = threadIdx.x & 31;
  uint32_t prefix = 0, prefix_mask = 0, cnt_above = 0;
  u64 mass_above = 0;
  double need = static_cast<double>(need_count);
  RadixResult res{};
  res.found = true;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = level_shift(level), nb = 1 << level_width(level);
    for (int i = threadIdx.x; i < nb; i += kThreads) {
      sh.cnt[i] = 0;
      if (kMass) sh.mass[i] = 0;
    }
    __syncthreads();
    const int64_t ngroups = (r.n + 3) / 4;
    for (int64_t g0 = 0; g0 < ngroups; g0 += kThreads) {  // warp-uniform trip count
      const int64_t g = g0 + threadIdx.x;
      float v[4];
      load_group(r, 4 * g, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t id = 4 * g + j;
        uint32_t key = 0;
        u64 q = 0;
        uint32_t digit = kNoDigit;
        if (id < r.n && elem(id, v[j], key) && (key & prefix_mask) == prefix) {
          digit = (key >> shift) & static_cast<uint32_t>(nb - 1);
          if (kMass) q = mass(v[j]);
        }
        if (!__any_sync(kFull, digit != kNoDigit)) continue;
        const unsigned peers = __match_any_sync(kFull, digit);
        unsigned lo = 0, hi = 0;
        if (kMass) {  // q <= 2^46: 23-bit halves, 32 lanes of either fit 32 bits
          lo = __reduce_add_sync(peers, static_cast<unsigned>(q & 0x7FFFFFull));
          hi = __reduce_add_sync(peers, static_cast<unsigned>(q >> 23));
        }
        if (digit != kNoDigit && lane == __ffs(peers) - 1) {
          atomicAdd(&sh.cnt[digit], static_cast<uint32_t>(__popc(peers)));
          if (kMass) atomicAdd(&sh.mass[digit], (static_cast<u64>(hi) << 23) + lo);
        }
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns bins [l * per, (l + 1) * per); suffix sums from the top bin down.
      const int per = nb / 32;
      uint32_t c = 0;
      u64 m = 0;
      for (int b = lane * per; b < (lane + 1) * per; ++b) {
        c += sh.cnt[b];
        if (kMass) m += sh.mass[b];
      }
      uint32_t sc = c;  // inclusive suffix over lanes >= lane
      u64 sm = m;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t tc = __shfl_down_sync(kFull, sc, o);
        const u64 tm = __shfl_down_sync(kFull, sm, o);
        if (lane + o < 32) { sc += tc; sm += tm; }
      }
      if (level == 0 && kMass) {
        need = static_cast<double>(top_p) * static_cast<double>(__shfl_sync(kFull, sm, 0));
        if (!(need > 0.0)) need = 1e-300;  // top_p <= 0: keep only the most likely token, as the CPU does
      }
      auto meets = [&](uint32_t cc, u64 mm) {
        return kMass ? static_cast<double>(mm) >= need : cc >= need_count;
      };
      const bool incl = meets(cnt_above + sc, mass_above + sm);
      const bool excl = meets(cnt_above + sc - c, mass_above + sm - m);
      if (lane == 0 && !incl) sh.b_found = 0;
      if (lane == 0 && incl) sh.b_found = 1;
      if (incl && !excl) {  // exactly one lane: the crossing is in its bins
        uint32_t cc = cnt_above + sc - c;
        u64 mm = mass_above + sm - m;
        for (int b = (lane + 1) * per - 1; b >= lane * per; --b) {
          const uint32_t bc = sh.cnt[b];
          const u64 bm = kMass ? sh.mass[b] : 0;
          if (meets(cc + bc, mm + bm)) {
            sh.b_digit = static_cast<uint32_t>(b);
            sh.b_cnt_gt = cc;
            sh.b_mass_gt = mm;
            sh.b_cnt_eq = bc;
            sh.b_mass_eq = bm;
            break;
          }
          cc += bc;
          mm += bm;
        }
      }
      if (lane == 0) sh.b_need = need;
    }
    __syncthreads();
    if (!sh.b_found) {
      res.found = false;
      __syncthreads();  // before the next use of sh
      return res;
    }
    prefix |= sh.b_digit << shift;
    prefix_mask |= static_cast<uint32_t>(nb - 1) << shift;
    cnt_above = sh.b_cnt_gt;
    mass_above = sh.b_mass_gt;
    need = sh.b_need;
    res.cnt_eq = sh.b_cnt_eq;
    res.mass_eq = sh.b_mass_eq;
    __syncthreads();  // sh is reused by the next level
  }
  res.key = prefix;
  res.cnt_gt = cnt_above;
  res.mass_gt = mass_above;
  res.need = need;
  return res;
}

// ---- first crossing in id order ---------------------------------------------------------------------

// weight(id, v) -> double >= 0. With total = sum of all weights and thr = a * total + b, returns the
// first id whose inclusive cumulative weight (id order) exceeds thr; if none does (rounding), the last
// id with a positive weight; -1 when no weight is positive.
// Warp w sums the contiguous ids [w * chunk, (w + 1) * chunk) in steps of 128 (a float4 per lane),
// keeping the sum of every `seg_steps` steps (one step up to vocab 262,144). The crossing's warp and
// segment follow from those sums, so only one segment is read again and walked with a warp scan.
template <class W>
__device__ int64_t find_crossing(const RowRef& r, W&& weight, double a, double b, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = static_cast<int>(r.n);  // ids in 32 bits (vocab < 2^31): fewer instructions per element
  const int steps = ((n + 127) / 128 + kWarps - 1) / kWarps;  // 128-id steps per warp
  const int seg_steps = steps > kMaxSegs ? (steps + kMaxSegs - 1) / kMaxSegs : 1;
  const int begin = min(warp * steps * 128, n), end = min(begin + steps * 128, n);
  // Inclusive prefix weights of lane's 4 ids at i0 (ids past the row weigh 0); returns their sum.
  auto lane_weights = [&](int i0, const float (&v)[4], double (&w)[4]) {
    double s4 = 0.0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[j] = i0 + j < n ? weight(i0 + j, v[j]) : 0.0;
      s4 += w[j];
    }
    return s4;
  };
  double lane_acc = 0.0, warp_total = 0.0;  // lane's sum in the current segment; the warp's sum so far
  int last = -1;
  int step = 0;
  for (int base = begin; base < end; base += 128 * kPrefetch) {
    float v[kPrefetch][4];
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) load_group(r, base + k * 128 + 4 * lane, v[k]);
#pragma unroll
    for (int k = 0; k < kPrefetch; ++k) {
      const int i0 = base + k * 128 + 4 * lane;
      if (base + k * 128 >= end) break;  // warp-uniform
      double w[4];
      lane_acc += lane_weights(i0, v[k], w);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (w[j] > 0.0) last = i0 + j;
      ++step;
      if (step % seg_steps == 0 || base + (k + 1) * 128 >= end) {  // segment complete: warp sum, kept
        double seg = lane_acc;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) seg += __shfl_xor_sync(kFull, seg, o);
        if (lane == 0) sh.seg[warp][(step - 1) / seg_steps] = seg;
        warp_total += seg;
        lane_acc = 0.0;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    last = max(last, __shfl_xor_sync(kFull, last, o));
  }
  if (lane == 0) { sh.wsum[warp] = warp_total; sh.wlast[warp] = last; }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    int64_t lst = -1;
    for (int w = 0; w < kWarps; ++w) {
      total += sh.wsum[w];
      lst = sh.wlast[w] > lst ? sh.wlast[w] : lst;
    }
    const double thr = a * total + b;
    double cum = 0.0;
    int found = -1, found_seg = -1;
    for (int w = 0; w < kWarps && found < 0; ++w) {
      if (cum + sh.wsum[w] > thr) {
        // Its segments, summed in the same order as wsum; rounding may leave no crossing: then the
        // last segment with weight (its walk falls back to its last positive id).
        const int wb = min(w * steps * 128, n);
        const int nseg = (min(n - wb, steps * 128) + 128 * seg_steps - 1) / (128 * seg_steps);
        double c = cum;
        for (int k = 0; k < nseg; ++k) {
          if (sh.seg[w][k] > 0.0) { found_seg = k; cum = c; }
          if (c + sh.seg[w][k] > thr) break;
          c += sh.seg[w][k];
        }
        found = found_seg >= 0 ? w : -1;
        break;
      }
      cum += sh.wsum[w];
    }
    sh.b_warp = found;
    sh.b_seg = found_seg;
    sh.b_cum = cum;
    sh.b_thr = thr;
    sh.b_result = lst;
  }
  __syncthreads();
  if (warp == sh.b_warp) {
    const double thr = sh.b_thr;
    double cum = sh.b_cum;
    const int sb = begin + sh.b_seg * seg_steps * 128;
    const int se = min(sb + seg_steps * 128, end);
    int seg_last = -1;  // fallback: the segment's last positive id
    for (int base = sb; base < se; base += 128) {
      const int i0 = base + 4 * lane;
      float v[4];
      load_group(r, i0, v);
      double w[4];
      const double s4 = lane_weights(i0, v, w);
      double incl = s4;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const double t = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += t;
      }
      int lane_last = -1;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (w[j] > 0.0) lane_last = i0 + j;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) lane_last = max(lane_last, __shfl_xor_sync(kFull, lane_last, o));
      seg_last = max(seg_last, lane_last);
      const double step_sum = __shfl_sync(kFull, incl, 31);
      if (cum + step_sum > thr) {
        const unsigned hit = __ballot_sync(kFull, cum + incl > thr);
        const int L = hit ? __ffs(hit) - 1 : 31;
        if (lane == L) {
          double c = cum + (incl - s4);
          int pick = -1;
          for (int j = 0; j < 4; ++j) {
            if (w[j] > 0.0) pick = i0 + j;  // fallback within the lane: its last positive weight
            c += w[j];
            if (c > thr && w[j] > 0.0) { pick = i0 + j; break; }
          }
          sh.b_result = pick >= 0 ? pick : seg_last;
        }
        seg_last = -2;  // found
        break;  // warp-uniform: step_sum and cum are the same in every lane
      }
      cum += step_sum;
    }
    if (lane == 0 && seg_last >= 0) sh.b_result = seg_last;
  }
  __syncthreads();
  const int64_t res = sh.b_result;
  __syncthreads();  // sh reused by the caller
  return res;
}

// ---- the kernel -----------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads, 1)
sample_kernel(float* __restrict__ logits, int64_t vocab, const GpuSamplingParams* __restrict__ params,
              GpuPenaltyEntry* __restrict__ entries, GpuSampleOutputs out, int mass_shift,
              void* chunk_pass_scratch, int num_chunks) {
  __shared__ Shared sh;
  const int64_t row_idx = blockIdx.x;
  const GpuSamplingParams p = params[row_idx];
  float* row_p = logits + row_idx * vocab;
  const RowRef row = row_ref(row_p, vocab);
  const float kNegInf = neg_inf();
  const int K = static_cast<int>(p.num_logprobs < vocab ? p.num_logprobs : vocab);
  // The chunk pass ran before: it drew the token of chunk_pass_draws rows already.
  const bool drawn = chunk_pass_scratch != nullptr && chunk_pass_draws(p);
  if (drawn && K == 0) return;  // block-uniform
  if (threadIdx.x < 64) sh.exp2_tbl[threadIdx.x] = kExp2Table[threadIdx.x];
  __syncthreads();  // the table before any weight (a min-p row after the chunk pass weighs first)

  // 1. Raw statistics: log-sum-exp, max, argmax (the chunk pass's when it ran).
  float lse, maxv;
  int64_t token;  // the argmax until step 4
  if (chunk_pass_scratch != nullptr) {
    const RowStats rs = *row_scratch(chunk_pass_scratch, row_idx, num_chunks).row;
    lse = rs.lse;
    maxv = rs.maxv;
    token = rs.argmax;
  } else {
    max_pass<true>(row, sh);
    lse = sh.lse;
    maxv = sh.maxv;
    token = sh.argmax;
  }

  // 2. Top-K raw logprobs: the K largest raw values, ties to the lower id.
  if (K > 0) {
    const RadixResult rr = radix_search<false>(
        row, [](int64_t, float v, uint32_t& key) { key = float_key(v); return true; },
        [](float) { return u64{0}; }, static_cast<uint32_t>(K), 0.0f, sh);
    const uint32_t take_eq = static_cast<uint32_t>(K) - rr.cnt_gt;  // >= 1
    int64_t tie_cut = kNoCut;
    if (take_eq < rr.cnt_eq) {
      tie_cut = find_crossing(
          row, [&](int64_t, float v) { return float_key(v) == rr.key ? 1.0 : 0.0; }, 0.0,
          static_cast<double>(take_eq) - 0.5, sh);
    }
    if (threadIdx.x == 0) sh.ntop = 0;
    __syncthreads();
    for_each_elem(row, [&](int64_t id, float v) {
      const uint32_t key = float_key(v);
      if (key > rr.key || (key == rr.key && id <= tie_cut)) {
        const int slot = atomicAdd(&sh.ntop, 1);
        if (slot < kMaxSampleLogprobs) { sh.top_v[slot] = v; sh.top_id[slot] = id; }
      }
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      const int n = sh.ntop < K ? sh.ntop : K;
      for (int i = 1; i < n; ++i) {  // insertion sort: value desc, id asc
        const float v = sh.top_v[i];
        const int64_t id = sh.top_id[i];
        int j = i - 1;
        while (j >= 0 && (sh.top_v[j] < v || (sh.top_v[j] == v && sh.top_id[j] > id))) {
          sh.top_v[j + 1] = sh.top_v[j];
          sh.top_id[j + 1] = sh.top_id[j];
          --j;
        }
        sh.top_v[j + 1] = v;
        sh.top_id[j + 1] = id;
      }
      for (int i = 0; i < kMaxSampleLogprobs; ++i) {
        out.top_ids[row_idx * kMaxSampleLogprobs + i] = i < n ? static_cast<int32_t>(sh.top_id[i]) : -1;
        out.top_logprobs[row_idx * kMaxSampleLogprobs + i] = i < n ? sh.top_v[i] - lse : 0.0f;
      }
    }
    __syncthreads();
  }
  if (drawn) return;

  // 3. Suppression, logit_bias and penalties, in place (ids are unique within a row's entries).
  GpuPenaltyEntry* ent = p.entry_count > 0 ? entries + p.entry_begin : nullptr;
  if (p.entry_count > 0) {
    const bool rep = p.repetition_penalty != 1.0f;
    const bool freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    for (int e = threadIdx.x; e < p.entry_count; e += kThreads) {
      const int32_t id = ent[e].id, c = ent[e].count;
      const float bias = ent[e].bias;
      float v = row_p[id];
      ent[e].saved = v;
      if (c == kEntrySuppressed) {
        v = kNegInf;
      } else {
        // Same fp32 operations as the CPU, no contraction: the penalised logit must match bit for bit.
        if (bias != 0.0f) v = __fadd_rn(v, bias);
        if (c >= 0) {  // a seen token
          if (rep) v = v > 0.0f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
          if (freq && c > 0)
            v = __fsub_rn(v, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(c)), p.presence_penalty));
        }
      }
      row_p[id] = v;
    }
    __syncthreads();
    max_pass<false>(row, sh);
    maxv = sh.maxv;
    token = sh.argmax;
  }
  const int64_t argmax = token;

  // 4. Sampling.
  if (!greedy(p)) {
    const Divider div = make_divider(p.temperature);
    const float m = divide(maxv, div);  // max of x / T: division by T > 0 is monotone
    if (m == kNegInf) {
      token = 0;  // no finite candidate: the CPU falls back to argmax of all -inf = id 0
    } else {
      const double md = m;
      const double scale = static_cast<double>(1ull << mass_shift);
      auto xt = [&](float v) { return divide(v, div); };

      bool topk = p.top_k > 0;
      uint32_t kth_key = 0;
      if (topk) {
        const RadixResult rk = radix_search<false>(
            row,
            [&](int64_t, float v, uint32_t& key) {
              const float x = xt(v);
              if (x == kNegInf) return false;
              key = float_key(x);
              return true;
            },
            [](float) { return u64{0}; }, static_cast<uint32_t>(p.top_k), 0.0f, sh);
        topk = rk.found;  // top_k >= number of candidates: no filter
        kth_key = rk.key;
      }

      const bool topp = p.top_p < 1.0f;
      uint32_t pivot = 0;
      int64_t tie_cut = kNoCut;
      if (topp) {
        const RadixResult rp = radix_search<true>(
            row,
            [&](int64_t, float v, uint32_t& key) {
              const float x = xt(v);
              if (x == kNegInf) return false;
              key = float_key(x);
              return !(topk && key < kth_key);
            },
            [&](float v) { return static_cast<u64>(sampling_weight(xt(v), m, md, sh.exp2_tbl) * scale); }, 0, p.top_p,
            sh);
        // rp.found: the total always reaches top_p * total (top_p < 1).
        pivot = rp.key;
        // Ties at the pivot (all with mass q_t): keep the first j in id order with
        // mass_gt + j' * q_t < need for j' < j; at least one (the CPU's cut >= 1).
        const u64 qt = rp.cnt_eq > 0 ? rp.mass_eq / rp.cnt_eq : 0;
        uint32_t j = rp.cnt_eq;
        if (qt > 0) {
          const double d = rp.need - static_cast<double>(rp.mass_gt);
          const double jj = ceil(d / static_cast<double>(qt));
          j = jj < 1.0 ? 1u : (jj < static_cast<double>(rp.cnt_eq) ? static_cast<uint32_t>(jj) : rp.cnt_eq);
        }
        if (j < rp.cnt_eq) {
          tie_cut = find_crossing(
              row,
              [&](int64_t, float v) {
                const float x = xt(v);
                return x != kNegInf && float_key(x) == pivot ? 1.0 : 0.0;
              },
              0.0, static_cast<double>(j) - 0.5, sh);
        }
      }

      const double min_p = p.min_p;
      const double u = rng_uniform(p.rng_key, p.step);
      const double* tbl = sh.exp2_tbl;
      // Plain temperature sampling (the common case) weighs every id without the filter checks: -inf
      // (and NaN) logits weigh 0 in sampling_weight.
      const auto plain_weight = [&](int64_t, float v) { return sampling_weight(xt(v), m, md, tbl); };
      const bool plain = !topk && !topp && !(min_p > 0.0);
      const int64_t pick =
          plain ? find_crossing(row, plain_weight, u, 0.0, sh)
          : find_crossing(
          row,
          [&](int64_t id, float v) -> double {
            const float x = xt(v);
            if (x == kNegInf) return 0.0;
            const uint32_t key = float_key(x);
            if (topk && key < kth_key) return 0.0;
            if (topp && (key < pivot || (key == pivot && id > tie_cut))) return 0.0;
            const double pr = sampling_weight(x, m, md, sh.exp2_tbl);
            if (min_p > 0.0 && pr < min_p) return 0.0;
            return pr;
          },
          u, 0.0, sh);
      token = pick >= 0 ? pick : argmax;
    }
  }

  // 5. Restore the raw logits, then the chosen token's raw logprob.
  if (p.entry_count > 0) {
    for (int e = threadIdx.x; e < p.entry_count; e += kThreads) row_p[ent[e].id] = ent[e].saved;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out.token_ids[row_idx] = static_cast<int32_t>(token);
    out.token_logprobs[row_idx] = row_p[token] - lse;
    if (out.device_token_ids != nullptr) out.device_token_ids[row_idx] = static_cast<int32_t>(token);
  }
}

// out[i] = x[i] / t by the sampler's Divider.
__global__ void divide_kernel(const float* __restrict__ x, int64_t n, float t, float* __restrict__ out) {
  const Divider div = make_divider(t);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = divide(x[i], div);
}

}  // namespace

void divide_like_sampler(const float* x, int64_t n, float t, float* out, cudaStream_t stream) {
  if (n == 0) return;
  divide_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, stream>>>(x, n, t, out);
  CUDA_CHECK_LAUNCH();
}

GpuSampleOutputs sample_outputs_at(void* base, int64_t num_rows) {
  auto* w = static_cast<int32_t*>(base);
  GpuSampleOutputs o;
  o.token_ids = w;
  o.token_logprobs = reinterpret_cast<float*>(w + num_rows);
  o.top_ids = w + 2 * num_rows;
  o.top_logprobs = reinterpret_cast<float*>(w + 2 * num_rows + num_rows * kMaxSampleLogprobs);
  return o;
}

size_t sample_scratch_bytes(int64_t num_rows, int64_t vocab) {
  return static_cast<size_t>(num_rows) * row_scratch_bytes(num_chunks(vocab));
}

void sample(float* logits, int64_t num_rows, int64_t vocab, const GpuSamplingParams* params,
            const GpuSamplingParams* host_params, GpuPenaltyEntry* entries, GpuSampleOutputs out,
            cudaStream_t stream, void* scratch) {
  NANOVLLM_CHECK(vocab >= 1 && vocab < (int64_t{1} << 31), "cuda_ops::sample: vocab must be in [1, 2^31), got ",
                 vocab);
  if (num_rows == 0) return;
  NANOVLLM_CHECK(num_rows < (int64_t{1} << 31), "cuda_ops::sample: too many rows: ", num_rows);
  // Fixed-point mass: each q <= 2^s and the row total <= vocab * 2^s must fit 64 bits; s <= 46 keeps the
  // 23-bit halves of the warp reduction exact.
  int bits = 0;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  const int mass_shift = 62 - bits < 46 ? 62 - bits : 46;
  // grid.y bounds the rows; block_crossing's per-thread share bounds the chunks.
  const bool chunk_pass = scratch != nullptr && num_rows <= 65535 && num_chunks(vocab) <= kMaxChunks;
  bool row_kernel = true;
  if (chunk_pass) {
    launch_chunk_pass(logits, num_rows, vocab, params, scratch, out, stream);
    row_kernel = host_params == nullptr || std::any_of(host_params, host_params + num_rows, needs_row_kernel);
  }
  if (row_kernel) {
    sample_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(
        logits, vocab, params, entries, out, mass_shift, chunk_pass ? scratch : nullptr,
        static_cast<int>(num_chunks(vocab)));
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nanovllm::cuda_ops
