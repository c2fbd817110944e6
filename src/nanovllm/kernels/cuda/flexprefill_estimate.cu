// flexprefill_estimate on CUDA (contract: kernels/pattern_estimators.h; CPU reference:
// kernels/cpu/flexprefill_estimate.cpp). No host synchronisation; gamma >= 1 writes the full causal pattern only.
//   1. pooling (pattern_pool.cuh): block-mean keys and chunk queries, as AvgPool; the mean of the last rows;
//   2. last_queries_attention.cuh: per query head, the last block of queries' causal softmax as fp64 means per key
//      position (vertical) and per diagonal (slash);
//   3. head: one CTA per query head pools both per block, scores the mean last query against the mean keys
//      (softmax: the estimate) and sets query_aware when sqrt(JS(estimate, vertical blocks)) < tau;
//   4. blocks: one CTA per (query head, vertical or slash): how many blocks (a head that is not query-aware: the tokens
//      covering gamma of the attention, by a radix select over the fp64 sums, / block + 1; at least the budget), then
//      which (block 0 first, then by decreasing mass, ties to the lower block: each block's rank in that order);
//   5. masses: one CTA per (query block of the chunk, KV head), for the group's query-aware heads, the pooled scores'
//      softmax over the causal key blocks (AvgPool's, the CPU's bits up to the exponential);
//   6. pairs: one CTA per query-aware head selects the (query block, key block) pairs covering gamma of all its masses
//      (radix select, ties to the lower pair);
//   7. write: one CTA per (query block, KV head) lists the union over the group.
// At 128K tokens (Qwen3-4B heads) the score tiles (128 last rows) dominate: 2 x 137 GFLOP of bf16 MMA and two reads of
// the keys; the pair selection re-reads up to Hq x 1024 x 1024 masses six times.
// Dual Chunk Attention (q [3, T, Hq, D]): the last queries' attention scores each key tile in its region's rotation
// (last_queries_attention.cuh), a pooled pair in the rotation of its region (ChunkGeometry::region), and the mean last
// query against key block j is the mean of each last row in its rotation for j: the rows lie in at most two chunks,
// so one mean per (rotation of the first chunk's rows, of the second's), nine.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_pattern_estimators.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/last_queries_attention.cuh"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/cuda/pattern_pool.cuh"
#include "nanovllm/kernels/cuda/pattern_select.cuh"
#include "nanovllm/kernels/cuda/radix_select.cuh"

namespace nanovllm::cuda_ops {
namespace {

namespace pt = pattern;

// mean_last [combos, Hq, D]: per query head, the mean of q's last `last` rows (row order, no FMA: the CPU's
// mean_rows()). DCA (combos 9): combination c = 3 a + b takes the rows in the first row's chunk in rotation a and the
// others (the next chunk) in rotation b (RowMeans' pairs in kernels/cpu/prefill_pattern.h).
template <typename T>
__global__ void mean_last_kernel(const T* __restrict__ q, int rows, int Hq, int D, int last,
                                 float* __restrict__ mean_last, pt::ChunkGeometry g) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;  // qh x D + d
  if (e >= Hq * D) return;
  const int c = blockIdx.y, a = c / 3, b = c % 3;
  const int first_chunk = g.dca_chunk_len > 0 ? (g.ctx - last) / g.dca_chunk_len : 0;
  float acc = 0.0f;
  for (int t = rows - last; t < rows; ++t) {
    const int r = g.dca_chunk_len > 0 && (g.start() + t) / g.dca_chunk_len != first_chunk ? b : a;
    acc = __fadd_rn(acc, static_cast<float>(q[r * g.rot_stride + int64_t{t} * Hq * D + e]));
  }
  mean_last[int64_t{c} * Hq * D + e] = acc / static_cast<float>(last);
}

// The mean_last combination (mean_last_kernel) the last rows use against key block j.
__device__ __forceinline__ int last_combo(const pt::ChunkGeometry& g, int last, int j) {
  if (g.dca_chunk_len <= 0) return 0;
  return 3 * g.region((g.ctx - last) / g.B, j) + g.region(g.nqb - 1, j);
}

// scale x (mq . key block j's mean), mean_k [Hk, D, nqb] of KV head h, summed over d in order (the CPU's dot()).
__device__ __forceinline__ float pooled_score(const float* mq, const float* mean_k, int h, int j, const pt::ChunkGeometry& g,
                                              float scale) {
  const float* kc = mean_k + int64_t{h} * g.D * g.nqb + j;  // [D] at stride nqb
  float acc = 0.0f;
  for (int d = 0; d < g.D; ++d) acc = __fadd_rn(acc, __fmul_rn(mq[d], kc[int64_t{d} * g.nqb]));
  return __fmul_rn(scale, acc);
}

// Per query head (one CTA): vblocks / sblocks [Hq, nqb] = the vertical / slash means summed per block of positions (in
// position order, fp64: the CPU's); est [Hq, nqb] = softmax over the key blocks of the mean last query's pooled scores;
// query_aware [Hq] = sqrt(Jensen-Shannon(est, vblocks)) < tau.
__global__ void __launch_bounds__(pt::kSelectThreads)
    head_kernel(const double* __restrict__ vertical, const double* __restrict__ slash,
                const float* __restrict__ mean_last, const float* __restrict__ mean_k, pt::ChunkGeometry g,
                float scale, double tau, double* __restrict__ vblocks, double* __restrict__ sblocks,
                float* __restrict__ est, int32_t* __restrict__ query_aware, int last) {
  __shared__ pt::Scratch sh;
  const int qh = blockIdx.x, h = qh / g.group(), tid = threadIdx.x;
  const double* v = vertical + int64_t{qh} * g.ctx;
  const double* sl = slash + int64_t{qh} * g.ctx;
  double* vb = vblocks + int64_t{qh} * g.nqb;
  double* sb = sblocks + int64_t{qh} * g.nqb;
  float* es = est + int64_t{qh} * g.nqb;
  const float* mq = mean_last + int64_t{qh} * g.D;
  float mx = -INFINITY;
  for (int j = tid; j < g.nqb; j += blockDim.x) {
    double a = 0, b = 0;
    for (int k = j * g.B; k < g.key_end(j); ++k) {
      a += v[k];
      b += sl[k];
    }
    vb[j] = a;
    sb[j] = b;
    es[j] = pooled_score(mq + int64_t{last_combo(g, last, j)} * g.Hq * g.D, mean_k, h, j, g, scale);
    mx = fmaxf(mx, es[j]);
  }
  // Softmax as cpu::softmax: max-subtracted float exponentials, their sum in double, each divided by it. Every thread
  // rereads only the entries it wrote.
  mx = pt::block_max_f(mx, sh);
  double part = 0;
  for (int j = tid; j < g.nqb; j += blockDim.x) {
    es[j] = expf(es[j] - mx);
    part += static_cast<double>(es[j]);
  }
  const double sum = pt::block_sum_d(part, sh);
  double js = 0;
  for (int j = tid; j < g.nqb; j += blockDim.x) {
    const double p = static_cast<float>(static_cast<double>(es[j]) / sum), r = vb[j], m = (p + r) / 2;
    if (p > 0) js += 0.5 * p * log(p / m);
    if (r > 0) js += 0.5 * r * log(r / m);
  }
  js = pt::block_sum_d(js, sh);
  if (tid == 0) query_aware[qh] = sqrt(fmax(js, 0.0)) < tau ? 1 : 0;
}

// vsel / ssel [Hq, nqb] (1: kept) of query head qh's vertical blocks (blockIdx.y 0) or slash blocks (1), the CPU's
// top_blocks(): the first `num` of block 0, then the others by decreasing mass (ties: the lower block). num = budget
// for a query-aware head, else the tokens covering gamma of the attention / B + 1, clamped to [budget, nqb].
__global__ void __launch_bounds__(radix::kThreads)
    blocks_kernel(const double* __restrict__ vertical, const double* __restrict__ slash,
                  const double* __restrict__ vblocks, const double* __restrict__ sblocks,
                  const int32_t* __restrict__ query_aware, pt::ChunkGeometry g, double gamma, int budget,
                  double fixed_scale, uint8_t* __restrict__ vsel, uint8_t* __restrict__ ssel) {
  __shared__ radix::Smem sm;
  const int qh = blockIdx.x, which = blockIdx.y, tid = threadIdx.x;
  int64_t num = budget;
  if (!query_aware[qh]) {
    // cover_count(): the fewest largest entries whose sum reaches gamma x the total, at least one.
    const double* x = (which == 0 ? vertical : slash) + int64_t{qh} * g.ctx;
    const auto entry = [x, fixed_scale](int64_t i, uint64_t& key, uint64_t& weight) {
      key = static_cast<uint64_t>(__double_as_longlong(x[i]));  // >= 0: the bits order as the values
      weight = static_cast<uint64_t>(__double2ull_rn(x[i] * fixed_scale));
      return true;
    };
    const int64_t tokens = max(radix::select_top(g.ctx, entry, {gamma, true}, sm).count, int64_t{1});
    num = min(max(tokens / g.B + 1, int64_t{budget}), int64_t{g.nqb});
  }
  const double* mass = (which == 0 ? vblocks : sblocks) + int64_t{qh} * g.nqb;
  uint8_t* sel = (which == 0 ? vsel : ssel) + int64_t{qh} * g.nqb;
  for (int j = tid; j < g.nqb; j += blockDim.x) {
    int64_t rank = 0;  // block j's place in the CPU's stable sort
    if (j != 0) {
      const double mj = mass[j];
      rank = 1;
      for (int o = 1; o < g.nqb; ++o) rank += mass[o] > mj || (mass[o] == mj && o < j);
    }
    sel[j] = rank < num ? 1 : 0;
  }
}

// The selection key of pair x = (chunk query block, key block) = qb x nqb + j: its mass above, ~x below.
__device__ __forceinline__ uint64_t pair_key(float mass, int64_t x) {
  return (uint64_t{__float_as_uint(mass)} << 32) | ~static_cast<uint32_t>(x);
}

// masses [Hq, nqc, nqb]: for the group's query-aware heads, row qb = softmax over key blocks j <= i (i = first + qb)
// of the pooled scores of query block i (cpu::softmax's arithmetic). One CTA per (qb, KV head).
__global__ void __launch_bounds__(pt::kSelectThreads)
    mass_kernel(const float* __restrict__ mean_q, const float* __restrict__ mean_k,
                const int32_t* __restrict__ query_aware, pt::ChunkGeometry g, float scale, float* __restrict__ masses) {
  extern __shared__ float mq[];  // [rotations, D]
  __shared__ pt::Scratch sh;
  const int qb = blockIdx.x, i = g.first + qb, h = blockIdx.y, n = i + 1, nqc = g.nqb - g.first, tid = threadIdx.x;
  for (int gi = 0; gi < g.group(); ++gi) {
    const int qh = h * g.group() + gi;
    if (!query_aware[qh]) continue;  // the same in every thread
    __syncthreads();                 // the previous head's readers of mq are done
    for (int r = 0; r < g.rotations(); ++r)
      for (int d = tid; d < g.D; d += blockDim.x)
        mq[r * g.D + d] = mean_q[((int64_t{r} * g.Hq + qh) * nqc + qb) * g.D + d];
    __syncthreads();
    // Each thread rereads only the entries it wrote.
    float* row = masses + (int64_t{qh} * nqc + qb) * g.nqb;
    float mx = -INFINITY;
    for (int j = tid; j < n; j += blockDim.x) {
      row[j] = pooled_score(mq + g.region(i, j) * g.D, mean_k, h, j, g, scale);
      mx = fmaxf(mx, row[j]);
    }
    mx = pt::block_max_f(mx, sh);
    double part = 0;
    for (int j = tid; j < n; j += blockDim.x) {
      row[j] = expf(row[j] - mx);
      part += static_cast<double>(row[j]);
    }
    const double sum = pt::block_sum_d(part, sh);
    for (int j = tid; j < n; j += blockDim.x) row[j] = static_cast<float>(static_cast<double>(row[j]) / sum);
  }
}

// pair_threshold [Hq]: a query-aware head keeps the pairs x with pair_key >= it: cover_mass over all its masses
// (decreasing, ties to the lower pair) until gamma of their total; other heads keep none (~0).
__global__ void __launch_bounds__(radix::kThreads)
    pairs_kernel(const float* __restrict__ masses, const int32_t* __restrict__ query_aware, pt::ChunkGeometry g,
                 double gamma, double fixed_scale, uint64_t* __restrict__ pair_threshold) {
  __shared__ radix::Smem sm;
  const int qh = blockIdx.x, nqc = g.nqb - g.first;
  if (!query_aware[qh]) {
    if (threadIdx.x == 0) pair_threshold[qh] = ~uint64_t{0};
    return;
  }
  const float* m = masses + int64_t{qh} * nqc * g.nqb;
  const int nqb = g.nqb, first = g.first;
  const auto entry = [m, nqb, first, fixed_scale](int64_t x, uint64_t& key, uint64_t& weight) {
    if (x % nqb > first + x / nqb) return false;  // key block past the query block
    key = pair_key(m[x], x);
    weight = static_cast<uint64_t>(__double2ull_rn(static_cast<double>(m[x]) * fixed_scale));
    return true;
  };
  const radix::Result r = radix::select_top(int64_t{nqc} * nqb, entry, {gamma, true}, sm);
  if (threadIdx.x == 0) pair_threshold[qh] = r.threshold;
}

// One CTA per (query block i of the chunk, KV head h): block_counts[h, i] / block_index[h, i, :] = the sink, the
// diagonal block, and for every query head of the group its vertical blocks j <= i, its slash blocks (i - s for
// s <= i) and, query-aware, its pairs of row i. full: every causal block (gamma >= 1).
__global__ void __launch_bounds__(pt::kSelectThreads)
    write_kernel(const uint8_t* __restrict__ vsel, const uint8_t* __restrict__ ssel,
                 const int32_t* __restrict__ query_aware, const float* __restrict__ masses,
                 const uint64_t* __restrict__ pair_threshold, pt::ChunkGeometry g, int32_t* __restrict__ counts,
                 int32_t* __restrict__ index, int max_blocks, bool full) {
  extern __shared__ uint8_t flags[];  // [nqb]: key block listed
  __shared__ pt::Scratch sh;
  const int qb = blockIdx.x, i = g.first + qb, h = blockIdx.y, n = i + 1, nqc = g.nqb - g.first;
  const int64_t row = int64_t{h} * g.nqb + i;
  if (full) {
    pt::write_causal_row(i, index + row * max_blocks, counts + row, max_blocks);
    return;
  }
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    bool keep = j == 0 || j == i;
    for (int gi = 0; gi < g.group() && !keep; ++gi) {
      const int qh = h * g.group() + gi;
      keep = vsel[int64_t{qh} * g.nqb + j] || ssel[int64_t{qh} * g.nqb + i - j];
      if (!keep && query_aware[qh]) {
        const int64_t x = int64_t{qb} * g.nqb + j;
        keep = pair_key(masses[int64_t{qh} * nqc * g.nqb + x], x) >= pair_threshold[qh];
      }
    }
    flags[j] = keep ? 1 : 0;
  }
  __syncthreads();
  pt::write_flagged(flags, n, index + row * max_blocks, counts + row, max_blocks, sh);
}

// The op's workspace.
struct Layout {
  lastq::Buffers<double> att;
  float* mean_k;              // [Hk, D, nqb]
  float* mean_q;              // [rotations, Hq, nqc, D]
  float* mean_last;           // [combos (DCA 9, else 1), Hq, D]
  double* vblocks;            // [Hq, nqb]
  double* sblocks;            // [Hq, nqb]
  float* est;                 // [Hq, nqb]
  int32_t* query_aware;       // [Hq]
  uint8_t* vsel;              // [Hq, nqb]
  uint8_t* ssel;              // [Hq, nqb]
  float* masses;              // [Hq, nqc, nqb]
  uint64_t* pair_threshold;   // [Hq]
  Layout(WorkspaceCarver& ws, const lastq::Geometry& lg, const pt::ChunkGeometry& g)
      : att(ws, lg),
        mean_k(ws.take<float>(static_cast<size_t>(g.Hk) * g.D * g.nqb)),
        mean_q(ws.take<float>(static_cast<size_t>(g.rotations()) * g.Hq * (g.nqb - g.first) * g.D)),
        mean_last(ws.take<float>(static_cast<size_t>(g.dca_chunk_len > 0 ? 9 : 1) * g.Hq * g.D)),
        vblocks(ws.take<double>(static_cast<size_t>(g.Hq) * g.nqb)),
        sblocks(ws.take<double>(static_cast<size_t>(g.Hq) * g.nqb)),
        est(ws.take<float>(static_cast<size_t>(g.Hq) * g.nqb)),
        query_aware(ws.take<int32_t>(static_cast<size_t>(g.Hq))),
        vsel(ws.take<uint8_t>(static_cast<size_t>(g.Hq) * g.nqb)),
        ssel(ws.take<uint8_t>(static_cast<size_t>(g.Hq) * g.nqb)),
        masses(ws.take<float>(static_cast<size_t>(g.Hq) * (g.nqb - g.first) * g.nqb)),
        pair_threshold(ws.take<uint64_t>(static_cast<size_t>(g.Hq))) {}
};

struct FlexPrefillTag {};

void launch_mean_last(const TensorView& q, int last, float* mean_last, const pt::ChunkGeometry& g, cudaStream_t st) {
  const int rows = g.T, Hq = g.Hq, D = g.D;
  const dim3 ctas(ceil_div_u(int64_t{Hq} * D, 128), g.dca_chunk_len > 0 ? 9 : 1);
  if (q.dtype() == DType::kBF16)
    mean_last_kernel<<<ctas, 128, 0, st>>>(q.data_as<const __nv_bfloat16>(), rows, Hq, D, last, mean_last, g);
  else if (q.dtype() == DType::kF16)
    mean_last_kernel<<<ctas, 128, 0, st>>>(q.data_as<const __half>(), rows, Hq, D, last, mean_last, g);
  else
    mean_last_kernel<<<ctas, 128, 0, st>>>(q.data_as<const float>(), rows, Hq, D, last, mean_last, g);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void flexprefill_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                          const AttentionMetadata& meta, float scale, const ops::FlexPrefillParams& params,
                          const ops::DualChunkParams* dca, ops::Stream s) {
  constexpr const char* op = "flexprefill_estimate (cuda)";
  const cudaStream_t st = stream_of(s);
  const int64_t dca_len = dca != nullptr ? dca->chunk_len : 0;
  NANOVLLM_CHECK(dca_len % lastq::kKeys == 0, op, ": Dual Chunk Attention's chunk length ", dca_len,
                 " must be a multiple of ", lastq::kKeys);
  const pt::ChunkGeometry g = pt::chunk_geometry(pattern, q, k_cache, meta, dca_len);
  const int nqc = g.nqb - g.first, max_blocks = static_cast<int>(pattern.block_index.dim(2));
  int32_t* counts = pattern.block_counts.data_as<int32_t>();
  int32_t* index = pattern.block_index.data_as<int32_t>();
  pt::clear_column_lists(pattern, st);
  const int optin = context_of(s).smem_optin();
  const size_t flags_smem = static_cast<size_t>(g.nqb);
  NANOVLLM_CHECK(flags_smem + sizeof(pt::Scratch) <= static_cast<size_t>(optin), op, ": ", g.nqb,
                 " query blocks need more shared memory than the device's ", optin, " bytes per CTA");
  CUDA_CHECK(cudaFuncSetAttribute(write_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(flags_smem)));
  const dim3 rows(static_cast<unsigned>(nqc), static_cast<unsigned>(g.Hk));
  if (params.gamma >= 1) {
    write_kernel<<<rows, pt::kSelectThreads, flags_smem, st>>>(nullptr, nullptr, nullptr, nullptr, nullptr, g, counts,
                                                              index, max_blocks, true);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  pt::check_query_and_cache(op, q, k_cache);
  NANOVLLM_CHECK(g.D <= lastq::kMaxDim, op, ": head_dim ", g.D, " is above the kernel's ", lastq::kMaxDim);
  NANOVLLM_CHECK(int64_t{nqc} * g.nqb <= (int64_t{1} << 32), op, ": ", nqc, " x ", g.nqb,
                 " (query block, key block) pairs do not fit the selection's 32-bit pair index");
  const lastq::Geometry lg = lastq::make_geometry(q, k_cache, g.ctx, std::min(g.B, g.T), scale, dca_len);
  NANOVLLM_CHECK(lastq::tile_smem(lg, true) <= static_cast<size_t>(optin), op, ": head_dim ", g.D,
                 " needs more shared memory than the device's ", optin, " bytes per CTA");
  WorkspaceCarver sizer;
  static_cast<void>(Layout(sizer, lg, g));
  WorkspaceCarver carver(op_workspace<FlexPrefillTag>(sizer.total(), s));
  const Layout w(carver, lg, g);

  const int32_t* bt = meta.block_tables.data_as<const int32_t>();
  pt::launch_pooling(op, q, k_cache, bt, w.mean_q, w.mean_k, g, st);
  launch_mean_last(q, lg.last, w.mean_last, g, st);
  lastq::run<double, true>(q, k_cache, bt, lg, w.att, st);
  head_kernel<<<g.Hq, pt::kSelectThreads, 0, st>>>(w.att.vertical, w.att.slash, w.mean_last, w.mean_k, g, scale,
                                                    params.tau, w.vblocks, w.sblocks, w.est, w.query_aware, lg.last);
  CUDA_CHECK(cudaGetLastError());
  // Fixed-point weights of the radix selections: totals below 2^53 (the tokens' means sum to 1 per head; the pairs'
  // masses to nqc).
  const int budget = static_cast<int>(std::min<int64_t>((params.min_budget + g.B - 1) / g.B, g.nqb));
  blocks_kernel<<<dim3(g.Hq, 2), radix::kThreads, 0, st>>>(w.att.vertical, w.att.slash, w.vblocks, w.sblocks,
                                                            w.query_aware, g, params.gamma, budget, std::ldexp(1.0, 50),
                                                            w.vsel, w.ssel);
  CUDA_CHECK(cudaGetLastError());
  mass_kernel<<<rows, pt::kSelectThreads, static_cast<size_t>(g.rotations() * g.D) * sizeof(float), st>>>(
      w.mean_q, w.mean_k, w.query_aware, g, scale, w.masses);
  CUDA_CHECK(cudaGetLastError());
  const double pair_scale = std::ldexp(1.0, 52 - static_cast<int>(std::bit_width(static_cast<uint32_t>(nqc))));
  pairs_kernel<<<g.Hq, radix::kThreads, 0, st>>>(w.masses, w.query_aware, g, params.gamma, pair_scale,
                                                  w.pair_threshold);
  CUDA_CHECK(cudaGetLastError());
  write_kernel<<<rows, pt::kSelectThreads, flags_smem, st>>>(w.vsel, w.ssel, w.query_aware, w.masses,
                                                            w.pair_threshold, g, counts, index, max_blocks, false);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nanovllm::cuda_ops
