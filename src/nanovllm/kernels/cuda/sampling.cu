// GPU sampler: one CTA of 1024 threads per row. See sampling.h for the contract and engine/sampler.cpp
// for the semantics replicated here.
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

#include <cstdint>

#include "nanovllm/core/error.h"
#include "nanovllm/engine/rng.h"
#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kNoDigit = 0xffffffffu;
constexpr int kMaxBins = 2048;
constexpr int kLevels = 3;
__host__ __device__ constexpr int level_shift(int l) { return l == 0 ? 21 : (l == 1 ? 10 : 0); }
__host__ __device__ constexpr int level_width(int l) { return l == 2 ? 10 : 11; }
constexpr int64_t kNoCut = INT64_MAX;
constexpr int kMaxSegs = 64;  // find_crossing: segment sums kept per warp

using u64 = unsigned long long;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Order-preserving key of a float (larger float -> larger key); -0 and +0 share one key as they compare
// equal on the CPU.
__device__ __forceinline__ uint32_t float_key(float v) {
  const uint32_t b = __float_as_uint(__fadd_rn(v, 0.0f));
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// ---- exp in fp64 for the sampling weights --------------------------------------------------------
// The draw weighs every id by exp(x - m) in fp64, as the CPU sampler does. CUDA's exp() costs ~19 fp64
// and ~50 other instructions, which made the weight pass issue-bound (~85 us per 151,936-logit row).
// exp_nonpos splits d = (64 n + j) ln2 / 64 + r with |r| <= ln2 / 128, so exp(d) = 2^n 2^(j/64) e^r with a
// degree-6 Taylor polynomial for e^r - 1 (truncation < 3e-20) and 2^(j/64) from a shared table: about
// 1 ulp, like CUDA's exp (the CPU's std::exp is within 1 ulp too), in ~13 operations.

// 2^(j/64), j = 0..63, correctly rounded.
__constant__ double kExp2Table[64] = {
    1.0, 1.0108892860517005, 1.0218971486541166, 1.0330248790212284,
    1.0442737824274138, 1.0556451783605572, 1.0671404006768237, 1.0787607977571199,
    1.0905077326652577, 1.102382583307841, 1.1143867425958924, 1.1265216186082418,
    1.1387886347566916, 1.1511892299529827, 1.1637248587775775, 1.1763969916502812,
    1.189207115002721, 1.202156731452703, 1.215247359980469, 1.22848053610687,
    1.241857812073484, 1.255380757024691, 1.2690509571917332, 1.2828700160787783,
    1.2968395546510096, 1.3109612115247644, 1.3252366431597413, 1.339667524053303,
    1.3542555469368927, 1.3690024229745905, 1.383909881963832, 1.3989796725383112,
    1.4142135623730951, 1.42961333839197, 1.4451808069770467, 1.460917794180647,
    1.4768261459394993, 1.4929077282912648, 1.5091644275934228, 1.5255981507445384,
    1.5422108254079407, 1.559004400237837, 1.5759808451078865, 1.593142151342267,
    1.6104903319492543, 1.6280274218573478, 1.645755478153965, 1.6636765803267364,
    1.681792830507429, 1.7001063537185235, 1.718619298122478, 1.7373338352737062,
    1.7562521603732995, 1.7753764925265212, 1.7947090750031072, 1.8142521755003989,
    1.8340080864093424, 1.8539791250833855, 1.8741676341103, 1.8945759815869656,
    1.9152065613971474, 1.9360617934922943, 1.9571441241754002, 1.978456026387951,
};

// exp(d) for d <= 0 (0 below the smallest subnormal, and for -inf and NaN), branch-free. tbl:
// kExp2Table in shared memory (lanes index it with different j).
__device__ __forceinline__ double exp_nonpos(double d, const double* tbl) {
  constexpr double kInvStep = 92.33248261689366;         // 64 / ln 2
  constexpr double kStepHi = 0.010830424696223417;       // ln 2 / 64, 36 significant bits: t * hi is exact
  constexpr double kStepLo = 2.572804622327669e-14;      // ln 2 / 64 - kStepHi
  constexpr double kShifter = 6755399441055744.0;         // 1.5 * 2^52: adding it rounds to an integer
  const bool underflow = !(d > -745.2);
  const double dc = underflow ? -745.0 : d;
  // t = nearest integer to dc * 64 / ln 2, left in tt's low mantissa bits (no fp64 round / convert ops).
  const double tt = fma(dc, kInvStep, kShifter);
  const double t = tt - kShifter;
  const double r = fma(-t, kStepLo, fma(-t, kStepHi, dc));
  double q = 1.0 / 720.0;  // (e^r - 1) / r, Horner; the dropped r^7 / 5040 term is < 3e-20
  q = fma(q, r, 1.0 / 120.0);
  q = fma(q, r, 1.0 / 24.0);
  q = fma(q, r, 1.0 / 6.0);
  q = fma(q, r, 0.5);
  q = fma(q, r, 1.0);
  q *= r;  // e^r - 1
  const int k = __double2loint(tt);  // == t
  const double b = tbl[k & 63];
  const double v = fma(b, q, b);  // 2^(j/64) e^r
  // 2^n, n = floor(k / 64) in [-1076, 0], as two normal factors (the product rounds only when subnormal).
  const int n = k >> 6, n1 = n >> 1, n2 = n - n1;
  const double e = (v * __hiloint2double((n1 + 1023) << 20, 0)) * __hiloint2double((n2 + 1023) << 20, 0);
  return underflow ? 0.0 : e;
}

// exp(x - m) in fp64 for a kept x <= m (m: the row's maximum, md: m as a double). Most of a real row
// lies far below its maximum, so weights under e^-30 of the maximum's come from fp32 expf (2 ulp:
// absolute error < 3e-20 of the maximum weight, summed over the row still below the fp64 rounding of
// the row's sums, whose order already differs from the CPU's); the rest from exp_nonpos.
__device__ __forceinline__ double sampling_weight(float x, float m, double md, const double* tbl) {
  const float df = x - m;  // fp32 only picks the path
  if (df < -30.0f) return static_cast<double>(expf(df));
  return exp_nonpos(static_cast<double>(x) - md, tbl);
}

struct RowRef {
  float* p;   // [n]
  int64_t n;
  bool vec;   // p is 16-byte aligned: float4 loads for whole groups
};

// v[j] = row[i0 + j] for i0 + j < n, else -inf.
__device__ __forceinline__ void load_group(const RowRef& r, int64_t i0, float (&v)[4]) {
  if (r.vec && i0 + 3 < r.n) {
    const float4 t = *reinterpret_cast<const float4*>(r.p + i0);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = i0 + j < r.n ? r.p[i0 + j] : neg_inf();
  }
}

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
  int b_chunk;  // crossing_from_chunks: the chunk holding the draw (-1: none)
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

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  if (m2 == neg_inf()) return;
  if (m == neg_inf()) { m = m2; s = s2; return; }
  const float mm = fmaxf(m, m2);
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}
__device__ __forceinline__ void argmax_merge(float& bv, int64_t& bi, float v2, int64_t i2) {
  if (v2 > bv || (v2 == bv && i2 < bi)) { bv = v2; bi = i2; }
}

// One logit into a running (max, argmax) and, when kLse, online log-sum-exp (lm, ls) over finite values.
template <bool kLse>
__device__ __forceinline__ void add_stat(float& bv, int64_t& bi, float& lm, float& ls, float v, int64_t id) {
  argmax_merge(bv, bi, v, id);
  if (kLse && v != neg_inf()) {
    if (v > lm) { ls = ls * expf(lm - v) + 1.0f; lm = v; }
    else ls += expf(v - lm);
  }
}

// Warp-wide merge of the running statistics (every lane ends with the warp's).
template <bool kLse>
__device__ __forceinline__ void warp_reduce_stats(float& bv, int64_t& bi, float& lm, float& ls) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(kFull, bv, o);
    const int64_t i2 = __shfl_xor_sync(kFull, bi, o);
    argmax_merge(bv, bi, v2, i2);
    if (kLse) {
      const float m2 = __shfl_xor_sync(kFull, lm, o), s2 = __shfl_xor_sync(kFull, ls, o);
      lse_merge(lm, ls, m2, s2);
    }
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

// ---- multi-CTA raw statistics (the raw pass for few rows) -------------------------------------------
// One CTA reading a 151,936-logit row alone is latency-bound (~40 us at bs 1), so with scratch the raw
// pass is split: row_stats_kernel gives each chunk of kStatsChunk logits its own CTA, and sample_kernel
// merges the chunks' (max, argmax, lse) instead of reading the row. Same results up to the fp32 order of
// the log-sum-exp (argmax ties still resolve to the lowest id).

struct __align__(16) ChunkStats {
  float maxv;      // raw max (-inf when every logit is -inf)
  int32_t argmax;  // lowest id holding maxv
  float lse_m;     // log-sum-exp over the finite logits: exp-sum lse_s relative to lse_m
  float lse_s;
};

constexpr int kStatsThreads = 256;
constexpr int kStatsGroupsPerThread = 4;  // float4 groups per thread, all loads issued before any math
constexpr int kStatsChunk = kStatsThreads * kStatsGroupsPerThread * 4;

// Above this many rows the one-CTA-per-row pass already fills the GPU and the extra launch loses (H200,
// vocab 151,936: 1 row 42 -> 10 us; 256 rows 85 -> 96 us).
constexpr int64_t kStatsMaxRows = 128;

int64_t stats_chunks(int64_t vocab) { return (vocab + kStatsChunk - 1) / kStatsChunk; }

// Grid (chunks, rows). stats: [rows, chunks].
__global__ void __launch_bounds__(kStatsThreads) row_stats_kernel(float* __restrict__ logits, int64_t vocab,
                                                                  ChunkStats* __restrict__ stats) {
  __shared__ ChunkStats red[kStatsThreads / 32];
  const int64_t row_idx = blockIdx.y;
  float* row_p = logits + row_idx * vocab;
  const RowRef row{row_p, vocab, (reinterpret_cast<uintptr_t>(row_p) & 15u) == 0};
  const int64_t g0 = int64_t{blockIdx.x} * (kStatsChunk / 4) + threadIdx.x;  // first float4 group
  float v[kStatsGroupsPerThread][4];
#pragma unroll
  for (int k = 0; k < kStatsGroupsPerThread; ++k) load_group(row, 4 * (g0 + int64_t{k} * kStatsThreads), v[k]);
  // The thread's 16 values (ids past the row load as -inf): max first, then the lowest id holding it and
  // the exp-sum relative to it, without add_stat's per-element branch and rescaling.
  float bv = neg_inf();
#pragma unroll
  for (int k = 0; k < kStatsGroupsPerThread; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) bv = fmaxf(bv, v[k][j]);
  int64_t bi = INT64_MAX;
  float ls = 0.0f;
#pragma unroll
  for (int k = kStatsGroupsPerThread - 1; k >= 0; --k) {  // descending ids: the last hit is the lowest
#pragma unroll
    for (int j = 3; j >= 0; --j) {
      const int64_t id = 4 * (g0 + int64_t{k} * kStatsThreads) + j;
      if (id < vocab && v[k][j] == bv) bi = id;
      ls += expf(v[k][j] - bv);  // 0 for -inf (bv finite)
    }
  }
  float lm = bv;
  if (bv == neg_inf()) ls = 0.0f;  // no finite value: the empty log-sum-exp
  warp_reduce_stats<true>(bv, bi, lm, ls);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = {bv, static_cast<int32_t>(bi < vocab ? bi : INT32_MAX), lm, ls};
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kStatsThreads / 32; ++w) {
    argmax_merge(bv, bi, red[w].maxv, red[w].argmax);
    lse_merge(lm, ls, red[w].lse_m, red[w].lse_s);
  }
  stats[row_idx * gridDim.x + blockIdx.x] = {bv, static_cast<int32_t>(bi < vocab ? bi : INT32_MAX), lm, ls};
}

// The raw pass from the chunks' statistics: sets sh.maxv, sh.argmax and sh.lse like max_pass<true>.
__device__ void merge_chunk_stats(const ChunkStats* __restrict__ chunks, int64_t n, Shared& sh) {
  float lm = neg_inf(), ls = 0.0f, bv = neg_inf();
  int64_t bi = INT64_MAX;
  for (int64_t c = threadIdx.x; c < n; c += kThreads) {
    const ChunkStats cs = chunks[c];
    argmax_merge(bv, bi, cs.maxv, cs.argmax);
    lse_merge(lm, ls, cs.lse_m, cs.lse_s);
  }
  reduce_stats<true>(bv, bi, lm, ls, sh);
}

// ---- multi-CTA sampling weights (plain temperature sampling) -----------------------------------------
// The draw's weight pass for rows without filters or penalties: chunk_weights_kernel gives each
// kStatsChunk-logit chunk its own CTA, which sums the fp64 weights exp(x / T - m) of its ids (m from the
// chunks' raw maxima); sample_kernel then finds the chunk holding u * total from these sums and walks
// that chunk alone. One CTA per row walking the whole row was issue-bound and, at 133-264 rows, ran two
// rows on most SMs (H200, 224 rows: ~225 us).

struct __align__(16) ChunkWeights {
  double sum;     // fp64 weight sum of the chunk's ids
  int32_t last;   // the highest row id in the chunk with a positive weight, -1 if none
};

// Grid (chunks, rows). stats: [rows, chunks] from row_stats_kernel; weights: [rows, chunks] (written
// for plain_temperature rows only).
__global__ void __launch_bounds__(kStatsThreads) chunk_weights_kernel(const float* __restrict__ logits, int64_t vocab,
                                                                      const GpuSamplingParams* __restrict__ params,
                                                                      const ChunkStats* __restrict__ stats,
                                                                      ChunkWeights* __restrict__ weights) {
  __shared__ double tbl[64];  // kExp2Table
  __shared__ double red_sum[kStatsThreads / 32];
  __shared__ int red_last[kStatsThreads / 32];
  __shared__ float row_max;
  const int64_t row_idx = blockIdx.y;
  const GpuSamplingParams p = params[row_idx];
  if (!plain_temperature(p)) return;  // block-uniform
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x < 64) tbl[threadIdx.x] = kExp2Table[threadIdx.x];
  if (warp == 0) {  // the row's raw maximum, as merge_chunk_stats finds it
    float mx = neg_inf();
    for (int c = lane; c < static_cast<int>(gridDim.x); c += 32) mx = fmaxf(mx, stats[row_idx * gridDim.x + c].maxv);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
    if (lane == 0) row_max = mx;
  }
  const float* row_p = logits + row_idx * vocab;
  const RowRef row{const_cast<float*>(row_p), vocab, (reinterpret_cast<uintptr_t>(row_p) & 15u) == 0};
  const int64_t g0 = int64_t{blockIdx.x} * (kStatsChunk / 4) + threadIdx.x;  // first float4 group
  float v[kStatsGroupsPerThread][4];
#pragma unroll
  for (int k = 0; k < kStatsGroupsPerThread; ++k) load_group(row, 4 * (g0 + int64_t{k} * kStatsThreads), v[k]);
  __syncthreads();
  const float T = p.temperature;
  const float m = __fdiv_rn(row_max, T);  // max of x / T, as in sample_kernel
  double acc = 0.0;
  int last = -1;
  if (m != neg_inf()) {  // else every weight is 0 (the CPU's all -inf fallback)
    const double md = m;
#pragma unroll
    for (int k = 0; k < kStatsGroupsPerThread; ++k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t id = 4 * (g0 + int64_t{k} * kStatsThreads) + j;
        if (id < vocab) {
          const double w = sampling_weight(__fdiv_rn(v[k][j], T), m, md, tbl);
          acc += w;
          if (w > 0.0) last = static_cast<int>(id);
        }
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    acc += __shfl_xor_sync(kFull, acc, o);
    last = max(last, __shfl_xor_sync(kFull, last, o));
  }
  if (lane == 0) { red_sum[warp] = acc; red_last[warp] = last; }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kStatsThreads / 32; ++w) {
    acc += red_sum[w];
    last = max(last, red_last[w]);
  }
  weights[row_idx * gridDim.x + blockIdx.x] = {acc, last};
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

// find_crossing(row, weight, u, 0) from chunk_weights_kernel's sums: the chunk where the cumulative
// weight first exceeds u * total, then find_crossing on that chunk alone (threshold less the weight
// before it). As in find_crossing, rounding that leaves no crossing falls back to the last positive id.
template <class W>
__device__ int64_t crossing_from_chunks(const RowRef& r, const ChunkWeights* __restrict__ cw, int num_chunks,
                                        W&& weight, double u, Shared& sh) {
  if (threadIdx.x == 0) {
    double total = 0.0;
    int64_t lst = -1;
    for (int c = 0; c < num_chunks; ++c) {
      total += cw[c].sum;
      lst = cw[c].last > lst ? cw[c].last : lst;
    }
    const double thr = u * total;
    double cum = 0.0;
    int found = -1;
    for (int c = 0; c < num_chunks; ++c) {
      if (cum + cw[c].sum > thr) { found = c; break; }
      cum += cw[c].sum;
    }
    sh.b_chunk = found;
    sh.b_cum = thr - cum;  // the threshold within the chunk
    sh.b_last = lst;
  }
  __syncthreads();
  const int c = sh.b_chunk;
  const double chunk_thr = sh.b_cum;
  const int64_t lst = sh.b_last;
  __syncthreads();  // sh reused by find_crossing
  if (c < 0) return lst;
  const int64_t begin = int64_t{c} * kStatsChunk;
  float* p = r.p + begin;
  const RowRef chunk{p, min(int64_t{kStatsChunk}, r.n - begin), (reinterpret_cast<uintptr_t>(p) & 15u) == 0};
  const int64_t local = find_crossing(chunk, weight, 0.0, chunk_thr, sh);
  return local >= 0 ? begin + local : lst;
}

// ---- the kernel -----------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads, 1)
sample_kernel(float* __restrict__ logits, int64_t vocab, const GpuSamplingParams* __restrict__ params,
              GpuPenaltyEntry* __restrict__ entries, GpuSampleOutputs out, int mass_shift,
              const ChunkStats* __restrict__ chunk_stats, const ChunkWeights* __restrict__ chunk_weights,
              int num_chunks) {
  __shared__ Shared sh;
  if (threadIdx.x < 64) sh.exp2_tbl[threadIdx.x] = kExp2Table[threadIdx.x];  // read after the first barrier
  const int64_t row_idx = blockIdx.x;
  const GpuSamplingParams p = params[row_idx];
  float* row_p = logits + row_idx * vocab;
  const RowRef row{row_p, vocab, (reinterpret_cast<uintptr_t>(row_p) & 15u) == 0};
  const float kNegInf = neg_inf();

  // 1. Raw statistics: log-sum-exp, max, argmax (from row_stats_kernel's chunks when it ran).
  if (chunk_stats != nullptr) merge_chunk_stats(chunk_stats + row_idx * num_chunks, num_chunks, sh);
  else max_pass<true>(row, sh);
  const float lse = sh.lse;

  // 2. Top-K raw logprobs: the K largest raw values, ties to the lower id.
  const int K = static_cast<int>(p.num_logprobs < vocab ? p.num_logprobs : vocab);
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

  // 3. Suppression and penalties, in place (ids are unique within a row's entries).
  GpuPenaltyEntry* ent = p.entry_count > 0 ? entries + p.entry_begin : nullptr;
  if (p.entry_count > 0) {
    const bool rep = p.repetition_penalty != 1.0f;
    const bool freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    for (int e = threadIdx.x; e < p.entry_count; e += kThreads) {
      const int32_t id = ent[e].id, c = ent[e].count;
      float v = row_p[id];
      ent[e].saved = v;
      if (c < 0) {
        v = kNegInf;
      } else {
        // Same fp32 operations as the CPU, no contraction: the penalised logit must match bit for bit.
        if (rep) v = v > 0.0f ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
        if (freq && c > 0)
          v = __fsub_rn(v, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(c)), p.presence_penalty));
      }
      row_p[id] = v;
    }
    __syncthreads();
    max_pass<false>(row, sh);
  }
  const float maxv = sh.maxv;
  int64_t token = sh.argmax;

  // 4. Sampling.
  const float T = p.temperature;
  if (T >= kSamplingEps) {
    const float m = __fdiv_rn(maxv, T);  // max of x / T: division by T > 0 is monotone
    if (m == kNegInf) {
      token = 0;  // no finite candidate: the CPU falls back to argmax of all -inf = id 0
    } else {
      const double md = m;
      const double scale = static_cast<double>(1ull << mass_shift);
      auto xt = [&](float v) { return __fdiv_rn(v, T); };

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
          plain && chunk_weights != nullptr && plain_temperature(p)
          ? crossing_from_chunks(row, chunk_weights + row_idx * num_chunks, num_chunks, plain_weight, u, sh)
          : plain ? find_crossing(row, plain_weight, u, 0.0, sh)
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
      token = pick >= 0 ? pick : sh.argmax;
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
  }
}

}  // namespace

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
  return static_cast<size_t>(num_rows) * static_cast<size_t>(stats_chunks(vocab)) *
         (sizeof(ChunkStats) + sizeof(ChunkWeights));
}

void sample(float* logits, int64_t num_rows, int64_t vocab, const GpuSamplingParams* params,
            GpuPenaltyEntry* entries, GpuSampleOutputs out, cudaStream_t stream, void* scratch,
            bool any_plain_temperature) {
  NANOVLLM_CHECK(vocab >= 1 && vocab < (int64_t{1} << 31), "cuda_ops::sample: vocab must be in [1, 2^31), got ",
                 vocab);
  if (num_rows == 0) return;
  NANOVLLM_CHECK(num_rows < (int64_t{1} << 31), "cuda_ops::sample: too many rows: ", num_rows);
  // Fixed-point mass: each q <= 2^s and the row total <= vocab * 2^s must fit 64 bits; s <= 46 keeps the
  // 23-bit halves of the warp reduction exact.
  int bits = 0;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  const int mass_shift = 62 - bits < 46 ? 62 - bits : 46;
  ChunkStats* stats = nullptr;
  ChunkWeights* weights = nullptr;
  const int64_t chunks = stats_chunks(vocab);
  if (scratch != nullptr && chunks > 1 && num_rows <= 65535 && (num_rows <= kStatsMaxRows || any_plain_temperature)) {
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(num_rows));
    stats = static_cast<ChunkStats*>(scratch);
    row_stats_kernel<<<grid, kStatsThreads, 0, stream>>>(logits, vocab, stats);
    CUDA_CHECK_LAUNCH();
    if (any_plain_temperature) {
      weights = reinterpret_cast<ChunkWeights*>(stats + num_rows * chunks);
      chunk_weights_kernel<<<grid, kStatsThreads, 0, stream>>>(logits, vocab, params, stats, weights);
      CUDA_CHECK_LAUNCH();
    }
  }
  sample_kernel<<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(
      logits, vocab, params, entries, out, mass_shift, stats, weights, static_cast<int>(chunks));
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
