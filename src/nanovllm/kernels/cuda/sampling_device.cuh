// Device pieces shared by the GPU sampler's two kernels (sampling.cu: one CTA per row;
// sampling_chunk_pass.cu: one CTA per 4,096-logit chunk): float keys, the fp64 sampling weights, row
// loads, the (max, argmax, log-sum-exp) merges, which rows the chunk pass draws, and the layout of the
// scratch the two kernels share.
#pragma once

#include <climits>
#include <cstdint>

#include "nanovllm/kernels/cuda/sampling.h"

namespace nanovllm::cuda_ops::sampling_detail {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Order-preserving key of a float (larger float -> larger key); -0 and +0 share one key as they compare
// equal on the CPU.
__device__ __forceinline__ uint32_t float_key(float v) {
  const uint32_t b = __float_as_uint(__fadd_rn(v, 0.0f));
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// ---- exp in fp64 for the sampling weights --------------------------------------------------------
// The draw weighs every id by exp(x - m) in fp64, as the CPU sampler does. CUDA's exp() costs ~19 fp64
// and ~50 other instructions, which made the weight pass issue-bound. exp_near splits
// d = (64 n + j) ln2 / 64 + r with |r| <= ln2 / 128, so exp(d) = 2^n 2^(j/64) e^r with a degree-6 Taylor
// polynomial for e^r - 1 (truncation < 3e-20) and 2^(j/64) from a shared table: about 1 ulp, like
// CUDA's exp (the CPU's std::exp is within 1 ulp too), in ~18 instructions.

// 2^(j/64), j = 0..63, correctly rounded.
static __constant__ double kExp2Table[64] = {
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

// exp_near's constants. A struct, so that the chunk pass can load them from shared memory into
// registers once (as 64-bit immediates most cost two register moves at every use).
struct ExpNear {
  double inv_step = 92.33248261689366;     // 64 / ln 2
  double step_hi = 0.010830424696223417;   // ln 2 / 64, 36 significant bits: t * step_hi is exact
  double step_lo = 2.572804622327669e-14;  // ln 2 / 64 - step_hi
  double c6 = 1.0 / 720.0, c5 = 1.0 / 120.0, c4 = 1.0 / 24.0, c3 = 1.0 / 6.0;  // Taylor, (e^r - 1) / r
  const double* tbl = nullptr;  // kExp2Table in shared memory (lanes index it with different j)
};

// exp(d) for d in [-32, 0] (sampling_weight's fp64 range), branch-free. Outside the range the result is
// meaningless but the table index stays in bounds (NaN logits are unspecified).
__device__ __forceinline__ double exp_near(double d, const ExpNear& e) {
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  // t = nearest integer to d * 64 / ln 2, left in tt's low mantissa bits (no fp64 round / convert ops).
  const double tt = fma(d, e.inv_step, kShifter);
  const double t = tt - kShifter;
  const double r = fma(-t, e.step_lo, fma(-t, e.step_hi, d));  // |r| <= ln 2 / 128
  double q = e.c6;  // (e^r - 1) / r, Horner; the dropped r^7 / 5040 term is < 3e-20
  q = fma(q, r, e.c5);
  q = fma(q, r, e.c4);
  q = fma(q, r, e.c3);
  q = fma(q, r, 0.5);
  q = fma(q, r, 1.0);
  q *= r;  // e^r - 1
  const int k = __double2loint(tt);  // == t
  const double b = e.tbl[k & 63];
  const double v = fma(b, q, b);  // 2^(j/64) e^r, in [0.99, 2.02)
  // times 2^n, n = floor(k / 64) in [-47, 0]: added to v's exponent field (the result stays normal).
  return __hiloint2double(__double2hiint(v) + (k >> 6) * (1 << 20), __double2loint(v));
}

// ---- x / T ----------------------------------------------------------------------------------------
// The sampler divides every logit of a row by the same temperature, and must round like the CPU's
// float x / T. __fdiv_rn refines 1 / T again for every x; Divider keeps r = RN(1 / T) and finishes each
// quotient with Markstein's correction: q0 = RN(x r), rem = x - T q0 (exact by FMA), q = RN(q0 + rem r),
// which is the correctly rounded x / T when r is the correctly rounded reciprocal and nothing under- or
// overflows (Markstein 1990; Muller et al., Handbook of Floating-Point Arithmetic, ch. 4). Hence the
// guards: T within [2^-20, 2^20] and |x| within [2^-60, 2^60], so q0, rem and q stay normal; 0 and
// +-inf pass through (their quotient by a finite T > 0); anything else takes __fdiv_rn.
// CudaSampling.DividerMatchesCpuDivision checks it bit for bit against the CPU division.
struct Divider {
  float t, r;    // T and RN(1 / T)
  float lo, hi;  // the |x| range of the fast path (lo = inf: none)
  float pass;    // |x| values whose quotient is x itself: inf when T is finite (else NaN: none)
};

__device__ __forceinline__ Divider make_divider(float t) {
  const bool fast = t >= 0x1p-20f && t <= 0x1p20f;
  Divider d{t, __frcp_rn(t), fast ? 0x1p-60f : __int_as_float(0x7f800000), 0x1p60f,
            isfinite(t) && t > 0.0f ? __int_as_float(0x7f800000) : __int_as_float(0x7fffffff)};
  // Opaque to the optimizer: kept in registers, not recomputed at every use inside loops.
  asm("" : "+f"(d.r), "+f"(d.lo), "+f"(d.pass));
  return d;
}

// Whether divide_fast(x, d) is the correctly rounded x / T.
__device__ __forceinline__ bool divider_fast(float x, const Divider& d) {
  const float ax = fabsf(x);
  return (ax >= d.lo) & (ax <= d.hi);
}
__device__ __forceinline__ float divide_fast(float x, const Divider& d) {
  const float q0 = __fmul_rn(x, d.r);
  return __fmaf_rn(__fmaf_rn(-q0, d.t, x), d.r, q0);
}
__device__ __forceinline__ float divide(float x, const Divider& d) {
  if (divider_fast(x, d)) return divide_fast(x, d);
  const float ax = fabsf(x);
  if (ax == 0.0f || ax == d.pass) return x;
  return __fdiv_rn(x, d.t);
}

// The weight of x below the threshold: fp32 expf (see sampling_weight).
constexpr float kFarBelow = -30.0f;

// exp(x - m) in fp64 for a kept x <= m (m: the maximum, md: m as a double). Most of a real row lies far
// below its maximum, so weights under e^-30 of the maximum's come from fp32 expf (2 ulp: absolute error
// < 3e-20 of the maximum weight, summed over the row still below the fp64 rounding of the row's sums,
// whose order already differs from the CPU's); the rest from exp_near.
__device__ __forceinline__ double sampling_weight(float x, float m, double md, const ExpNear& e) {
  const float df = x - m;  // fp32 only picks the path
  if (df < kFarBelow) return static_cast<double>(expf(df));
  return exp_near(static_cast<double>(x) - md, e);
}
__device__ __forceinline__ double sampling_weight(float x, float m, double md, const double* tbl) {
  return sampling_weight(x, m, md, ExpNear{.tbl = tbl});
}

// ---- row loads ------------------------------------------------------------------------------------

struct RowRef {
  float* p;   // [n]
  int64_t n;
  bool vec;   // p is 16-byte aligned: float4 loads for whole groups
};

__device__ __forceinline__ RowRef row_ref(float* p, int64_t n) {
  return {p, n, (reinterpret_cast<uintptr_t>(p) & 15u) == 0};
}

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

// ---- max / argmax / log-sum-exp merges ------------------------------------------------------------

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

// Warp-wide merge of running (max, argmax) and, when kLse, log-sum-exp (lm, ls) statistics (every lane
// ends with the warp's).
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

// ---- the chunk pass ---------------------------------------------------------------------------------

constexpr int kChunkThreads = 256;
constexpr int kChunkGroups = 4;                            // float4 groups per thread
constexpr int kChunk = kChunkThreads * kChunkGroups * 4;  // logits per chunk: 4,096

constexpr int kMaxChunks = 4 * kChunkThreads;           // the chunk pass serves vocabs up to 4,194,304

__host__ __device__ inline int64_t num_chunks(int64_t vocab) { return (vocab + kChunk - 1) / kChunk; }

// Greedy as sample_kernel reads the temperature (a NaN temperature is greedy too).
__host__ __device__ inline bool greedy(const GpuSamplingParams& p) { return !(p.temperature >= kSamplingEps); }

// Rows whose token the chunk pass draws itself: no penalty entries, and greedy or plain temperature.
__host__ __device__ inline bool chunk_pass_draws(const GpuSamplingParams& p) {
  return p.entry_count == 0 && (greedy(p) || plain_temperature(p));
}

// Rows that still need sample_kernel after the chunk pass: other draws, or top-K logprobs.
__host__ __device__ inline bool needs_row_kernel(const GpuSamplingParams& p) {
  return !chunk_pass_draws(p) || p.num_logprobs > 0;
}

// Scratch: one block per row at a fixed offset (so a row's arrival counter stays in place whatever the
// step's row count; sample_scratch_bytes(rows, vocab) covers `rows` blocks):
//   RowStats                : the row's merged raw statistics, and the chunk pass's arrival counter
//   ChunkStats [chunks]     : per chunk raw max, lowest id holding it, exp-sum relative to it
//   double     [chunks]     : per chunk fp64 sum of the sampling weights exp(x / T - ym), ym the chunk's
//                             max of x / T (plain temperature rows only)
struct __align__(16) RowStats {
  float maxv;         // raw max
  int32_t argmax;     // lowest id holding it
  float lse;          // raw log-sum-exp
  uint32_t arrivals;  // chunks done in the running pass; 0 between passes (zeroed once before first use)
};
struct __align__(16) ChunkStats {
  float maxv;      // raw max (-inf when every logit is -inf)
  int32_t argmax;  // lowest id holding maxv
  float exp_sum;   // sum of exp(x - maxv) (0 when maxv is -inf)
  float unused;
};

__host__ __device__ inline size_t row_scratch_bytes(int64_t chunks) {
  const size_t b = sizeof(RowStats) + static_cast<size_t>(chunks) * (sizeof(ChunkStats) + sizeof(double));
  return (b + 15) / 16 * 16;
}

struct RowScratch {
  RowStats* row;
  ChunkStats* chunks;  // [chunks]
  double* weights;     // [chunks]
};

__host__ __device__ inline RowScratch row_scratch(void* scratch, int64_t row, int64_t chunks) {
  char* b = static_cast<char*>(scratch) + static_cast<size_t>(row) * row_scratch_bytes(chunks);
  auto* rs = reinterpret_cast<RowStats*>(b);
  auto* cs = reinterpret_cast<ChunkStats*>(rs + 1);
  return {rs, cs, reinterpret_cast<double*>(cs + chunks)};
}

// The chunk pass over [rows, vocab] logits (sampling_chunk_pass.cu): every row's RowStats, and for
// chunk_pass_draws rows the token and its logprob in `out`.
void launch_chunk_pass(const float* logits, int64_t num_rows, int64_t vocab, const GpuSamplingParams* params,
                       void* scratch, GpuSampleOutputs out, cudaStream_t stream);

}  // namespace nanovllm::cuda_ops::sampling_detail
