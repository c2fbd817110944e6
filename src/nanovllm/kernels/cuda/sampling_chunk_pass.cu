// The GPU sampler's chunk pass: one 256-thread CTA per 4,096-logit chunk of every row, reading the
// logits once. Each CTA finds its chunk's raw max, the lowest id holding it and the exp-sum relative to
// it; for plain temperature rows also the fp64 sum of the sampling weights relative to the chunk's own
// max of x / T (the row's max is not known yet). The last CTA of a row to arrive (a per-row counter)
// merges the row's chunks into RowStats and, for the rows the pass draws (chunk_pass_draws), picks the
// token:
//  * greedy: the argmax;
//  * plain temperature: the chunk whose cumulative weight (chunk sums rescaled to the row's max) first
//    exceeds u * total, then inside it the id whose cumulative exact weight exp(x / T - m) does, as the
//    CPU's `u * total < cum` walk in id order. The chunk sums differ from the CPU's running sum only by
//    fp64 rounding (~1e-16 of the total), so a draw differs only within that of a boundary.
// Rows with filters, penalties or top-K logprobs are left to sample_kernel, which reads RowStats.
#include <climits>
#include <cmath>

#include "nanovllm/core/rng.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/sampling_device.cuh"

namespace nanovllm::cuda_ops::sampling_detail {
namespace {

constexpr int kWarps = kChunkThreads / 32;

struct Shared {
  double tbl[64];  // kExp2Table
  ExpNear exp_near;  // exp_near's constants (tbl unset), loaded from here into registers
  float red_max[kWarps];
  float red_exp[kWarps];
  double red_weight[kWarps];
  int argmax;  // lowest id holding the chunk's max (atomicMin)
  bool last;   // this CTA is the row's last to arrive: it finishes the row
  // finish_row: the row's statistics
  float st_bv[kWarps], st_lm[kWarps], st_ls[kWarps];
  int64_t st_bi[kWarps];
  float row_max, row_lse;
  int64_t row_argmax;
  // block_crossing
  double scan[kWarps];
  int last_positive[kWarps];
  int first;  // the first thread whose range ends past the threshold (atomicMin)
  int pick;
  double pick_rest;
};

// 2^x, MUFU.EX2 with denormals flushed (no range fix-ups around it).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ float block_max(float v, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  if ((threadIdx.x & 31) == 0) sh.red_max[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = sh.red_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, sh.red_max[w]);
  return m;
}

struct Crossing {
  int item;     // -1: no item has a positive weight
  double rest;  // thr less the cumulative weight before item (+inf for the fallback)
};

// Among n <= kPer * kChunkThreads items of weight weight(i) >= 0 in order, with thr = a * total + b: the
// first item whose inclusive cumulative weight exceeds thr, counting only items of positive weight.
// Thread t weighs the contiguous items [t * kPer, (t + 1) * kPer) at once (their loads in flight
// together) and keeps the weights; the sums are scanned across the block in a fixed order, and the first
// thread whose range ends past thr walks its weights. If rounding leaves no crossing, the last item with
// a positive weight (rest = +inf).
template <int kPer, class W>
__device__ Crossing block_crossing(int n, W&& weight, double a, double b, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int begin = static_cast<int>(threadIdx.x) * kPer;
  double w[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) w[i] = begin + i < n ? weight(begin + i) : 0.0;
  double sum = 0.0;
  int last = -1;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    sum += w[i];
    if (w[i] > 0.0) last = begin + i;
  }
  double incl = sum;  // inclusive scan over the warp's lanes
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += t;
  }
  double excl = __shfl_up_sync(kFull, incl, 1);
  if (lane == 0) excl = 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(kFull, last, o));
  if (lane == 31) sh.scan[warp] = incl;
  if (lane == 0) sh.last_positive[warp] = last;
  if (threadIdx.x == 0) sh.first = INT_MAX;
  __syncthreads();
  double before_warp = 0.0, total = 0.0;
  int last_all = -1;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) before_warp = total;
    total += sh.scan[w];
    last_all = max(last_all, sh.last_positive[w]);
  }
  const double thr = a * total + b;
  const unsigned hit = __ballot_sync(kFull, before_warp + incl > thr);
  if (hit != 0 && lane == __ffs(hit) - 1) atomicMin(&sh.first, static_cast<int>(threadIdx.x));
  __syncthreads();
  if (static_cast<int>(threadIdx.x) == sh.first) {
    double cum = before_warp + excl;
    int pick = -1;
    double pick_rest = 0.0;
    bool crossed = false;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (crossed) continue;
      if (w[i] > 0.0) { pick = begin + i; pick_rest = thr - cum; }  // rounding fallback: the last positive
      cum += w[i];
      crossed = w[i] > 0.0 && cum > thr;
    }
    sh.pick = pick;
    sh.pick_rest = pick_rest;
  }
  __syncthreads();
  const Crossing res = sh.first != INT_MAX && sh.pick >= 0 ? Crossing{sh.pick, sh.pick_rest}
                                                           : Crossing{last_all, INFINITY};
  __syncthreads();  // sh reused by the caller
  return res;
}

// The token of a plain temperature row, from its merged statistics in sh.
__device__ int64_t draw(const RowRef& row, const GpuSamplingParams& p, const RowScratch& rs, int chunks,
                        Shared& sh) {
  const Divider div = make_divider(p.temperature);
  const float m = divide(sh.row_max, div);  // max of x / T: division by T > 0 is monotone
  if (m == neg_inf()) return 0;  // no finite candidate: the CPU falls back to argmax of all -inf = id 0
  const double md = m;
  const double u = rng_uniform(p.rng_key, p.step);
  // Chunk c weighs its sum relative to its own max of x / T, times exp(that max - m).
  const auto chunk_weight = [&](int c) {
    const float cmax = __ldcg(&rs.chunks[c].maxv);
    if (cmax == neg_inf()) return 0.0;
    return __ldcg(rs.weights + c) * exp(static_cast<double>(divide(cmax, div)) - md);
  };
  const Crossing in_row = block_crossing<kMaxChunks / kChunkThreads>(chunks, chunk_weight, u, 0.0, sh);
  if (in_row.item < 0) return sh.row_argmax;
  const int64_t begin = int64_t{in_row.item} * kChunk;
  const float* p0 = row.p + begin;
  const int n = static_cast<int>(min(int64_t{kChunk}, row.n - begin));
  const auto elem_weight = [&](int i) { return sampling_weight(divide(p0[i], div), m, md, sh.tbl); };
  const Crossing in_chunk = block_crossing<kChunk / kChunkThreads>(n, elem_weight, 0.0, in_row.rest, sh);
  // No positive exact weight in the chunk (its sum came from weights under fp32 expf's range): the
  // argmax, whose weight is 1.
  return in_chunk.item >= 0 ? begin + in_chunk.item : sh.row_argmax;
}

// The row's last CTA: RowStats from the chunks, then the token of a chunk_pass_draws row.
__device__ void finish_row(const RowRef& row, int64_t row_idx, const GpuSamplingParams& p, const RowScratch& rs,
                           int chunks, GpuSampleOutputs out, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // 1. Merge the chunks (written by other CTAs: L2 loads) in a fixed order.
  float bv = neg_inf(), lm = neg_inf(), ls = 0.0f;
  int64_t bi = INT64_MAX;
  for (int c = threadIdx.x; c < chunks; c += kChunkThreads) {
    const float4 cs = __ldcg(reinterpret_cast<const float4*>(rs.chunks + c));  // ChunkStats
    argmax_merge(bv, bi, cs.x, __float_as_int(cs.y));
    lse_merge(lm, ls, cs.x, cs.z);
  }
  warp_reduce_stats<true>(bv, bi, lm, ls);
  if (lane == 0) { sh.st_bv[warp] = bv; sh.st_bi[warp] = bi; sh.st_lm[warp] = lm; sh.st_ls[warp] = ls; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      argmax_merge(bv, bi, sh.st_bv[w], sh.st_bi[w]);
      lse_merge(lm, ls, sh.st_lm[w], sh.st_ls[w]);
    }
    const float lse = lm == neg_inf() ? neg_inf() : lm + logf(ls);
    sh.row_max = bv;
    sh.row_argmax = bi;
    sh.row_lse = lse;
    rs.row->maxv = bv;
    rs.row->argmax = static_cast<int32_t>(bi);
    rs.row->lse = lse;
  }
  __syncthreads();

  // 2. The token.
  if (chunk_pass_draws(p)) {
    int64_t token = sh.row_argmax;  // greedy
    if (!greedy(p)) token = draw(row, p, rs, chunks, sh);
    if (threadIdx.x == 0) {
      out.token_ids[row_idx] = static_cast<int32_t>(token);
      out.token_logprobs[row_idx] = row.p[token] - sh.row_lse;
      if (out.device_token_ids != nullptr) out.device_token_ids[row_idx] = static_cast<int32_t>(token);
    }
  }
  if (threadIdx.x == 0) rs.row->arrivals = 0;  // for the next pass
}

constexpr float kLog2e = 1.44269504f;

// The thread's share of the chunk's weight sum: sum of sampling_weight(x / T, cm) over its values, cm
// the chunk's max of x / T (cmax / T). Where a whole warp takes one path, it runs without per-value
// branches: every quotient by Divider's fast path, every weight by exp_near (all within e^-30 of cm) or
// by expf (all below).
__device__ double chunk_weight_sum(const float (&v)[kChunkGroups][4], float cmax, float temperature,
                                   const ExpNear& shared_consts, const double* tbl) {
  const Divider div = make_divider(temperature);
  ExpNear e = shared_consts;  // registers: the compiler cannot turn values loaded from memory into immediates
  e.tbl = tbl;                // known to be shared memory (a pointer loaded from memory would be generic)
  float cm = divide(cmax, div);
  double cmd = cm;
  asm("" : "+f"(cm), "+d"(cmd));  // kept in registers, not recomputed for every value
  float y[kChunkGroups][4];
  bool fast = true;
#pragma unroll
  for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) fast &= divider_fast(v[k][j], div);
  if (__all_sync(kFull, fast)) {
#pragma unroll
    for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) y[k][j] = divide_fast(v[k][j], div);
  } else {
#pragma unroll
    for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) y[k][j] = divide(v[k][j], div);
  }
  bool all_near = true, all_far = true;
#pragma unroll
  for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool far = y[k][j] - cm < kFarBelow;
      all_near &= !far;
      all_far &= far;
    }
  double ws = 0.0;
  if (__all_sync(kFull, all_near)) {
#pragma unroll
    for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) ws += exp_near(static_cast<double>(y[k][j]) - cmd, e);
  } else if (__all_sync(kFull, all_far)) {
#pragma unroll
    for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) ws += static_cast<double>(expf(y[k][j] - cm));
  } else {
#pragma unroll
    for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) ws += sampling_weight(y[k][j], cm, cmd, e);
  }
  return ws;
}

// Grid (chunks, rows). 4 CTAs per SM: caps the registers at 64 (the finisher's kept weights would take 80).
__global__ void __launch_bounds__(kChunkThreads, 4)
    chunk_pass_kernel(const float* __restrict__ logits, int64_t vocab, const GpuSamplingParams* __restrict__ params,
                      void* scratch, int chunks, GpuSampleOutputs out) {
  __shared__ Shared sh;
  // PDL (pdl.cuh): the chunk pass itself is launched without the attribute (everything before it has
  // completed), so it may let its dependents start at once. The one that follows it in a decode step is
  // the next step's stage_step_inputs, whose prologue reads only its pinned host staging; its reads of
  // the token ids come after its wait.
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row_idx = blockIdx.y;
  const RowRef row = row_ref(const_cast<float*>(logits) + row_idx * vocab, vocab);
  const int64_t g0 = int64_t{blockIdx.x} * (kChunk / 4) + threadIdx.x;  // first float4 group
  float v[kChunkGroups][4];  // ids 4 * (g0 + k * kChunkThreads) + j; past the row: -inf
#pragma unroll
  for (int k = 0; k < kChunkGroups; ++k) load_group(row, 4 * (g0 + int64_t{k} * kChunkThreads), v[k]);
  if (threadIdx.x < 64) sh.tbl[threadIdx.x] = kExp2Table[threadIdx.x];
  if (threadIdx.x == 0) {
    sh.argmax = INT_MAX;
    sh.exp_near = ExpNear{};
  }
  const GpuSamplingParams p = params[row_idx];

  // 1. The chunk's raw max (its barrier also publishes tbl and argmax), and the lowest id holding it,
  //    searched only by the threads holding it.
  float tmax = neg_inf();
#pragma unroll
  for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) tmax = fmaxf(tmax, v[k][j]);
  const float cmax = block_max(tmax, sh);
  if (tmax == cmax) {
    int64_t first = INT64_MAX;
#pragma unroll
    for (int k = kChunkGroups - 1; k >= 0; --k)
#pragma unroll
      for (int j = 3; j >= 0; --j)
        if (v[k][j] == cmax) first = 4 * (g0 + int64_t{k} * kChunkThreads) + j;
    atomicMin(&sh.argmax, static_cast<int>(min(first, int64_t{INT_MAX})));  // ids past the row lose to any in it
  }

  // 2. The exp-sum relative to the max. ex2.approx (2 ulp, plus the rounding of its argument) only
  //    feeds the fp32 log-sum-exp of the logprobs.
  float es = 0.0f;
  if (cmax != neg_inf()) {
    const float shift = -cmax * kLog2e;
#pragma unroll
    for (int k = 0; k < kChunkGroups; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j) es += exp2_approx(fmaf(v[k][j], kLog2e, shift));
  }

  // 3. Plain temperature rows: the fp64 sampling weights relative to the chunk's max of x / T.
  double ws = plain_temperature(p) && cmax != neg_inf()  // block-uniform
                  ? chunk_weight_sum(v, cmax, p.temperature, sh.exp_near, sh.tbl)
                  : 0.0;

  // 4. Block sums in a fixed order, the chunk's results, and its arrival.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    es += __shfl_xor_sync(kFull, es, o);
    ws += __shfl_xor_sync(kFull, ws, o);
  }
  if (lane == 0) { sh.red_exp[warp] = es; sh.red_weight[warp] = ws; }
  __syncthreads();
  const RowScratch rs = row_scratch(scratch, row_idx, chunks);
  if (threadIdx.x == 0) {
    float e = 0.0f;
    double w = 0.0;
    for (int i = 0; i < kWarps; ++i) { e += sh.red_exp[i]; w += sh.red_weight[i]; }
    rs.chunks[blockIdx.x] = {cmax, sh.argmax, e, 0.0f};
    rs.weights[blockIdx.x] = w;
    __threadfence();  // the results before the arrival
    sh.last = atomicAdd(&rs.row->arrivals, 1u) == static_cast<unsigned>(chunks - 1);
    __threadfence();  // and the other CTAs' results after it
  }
  __syncthreads();
  if (sh.last) finish_row(row, row_idx, p, rs, chunks, out, sh);
}

}  // namespace

void launch_chunk_pass(const float* logits, int64_t num_rows, int64_t vocab, const GpuSamplingParams* params,
                       void* scratch, GpuSampleOutputs out, cudaStream_t stream) {
  const int64_t chunks = num_chunks(vocab);
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(num_rows));
  chunk_pass_kernel<<<grid, kChunkThreads, 0, stream>>>(logits, vocab, params, scratch, static_cast<int>(chunks),
                                                        out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops::sampling_detail
