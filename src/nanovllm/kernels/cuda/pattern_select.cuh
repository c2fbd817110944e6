// Block-wide pieces the CUDA pattern estimators share (one CTA per (KV head, query block)): double reductions and
// scans, the cover-mass selection of the CPU reference (kernels/cpu/prefill_pattern.cpp, cover_mass: forced entries,
// then by decreasing mass, ties to the lower index, while the kept mass is below threshold x total) and the block
// budget's top-k, both as a radix select (radix_select.cuh), and the write of a (KV head, query block)'s list from
// per-key-block flags. Every function is called by all threads of the block (blockDim.x = kSelectThreads) and
// synchronises.
#pragma once

#include <cstdint>

#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/radix_select.cuh"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm::cuda_ops::pattern {

// The chunk a pattern is estimated for (cpu::PrefillChunk's geometry): T queries at positions [start, ctx), query and
// key blocks of B tokens (nqb of them, the chunk's from `first`), keys in a paged cache of BS-token blocks.
struct ChunkGeometry {
  int T, ctx, Hq, Hk, D, B, nqb, first, BS;
  // Dual Chunk Attention (> 0: chunks of dca_chunk_len positions, a multiple of B; q [3, T, Hq, D], rot_stride = T Hq D
  // elements between its rotations). 0: plain attention.
  int dca_chunk_len;
  int64_t rot_stride;
  // The rotation (dca_region: 0 intra, 1 successive, 2 inter) query block i uses for key block j; 0 without DCA.
  __host__ __device__ int region(int i, int j) const {
    if (dca_chunk_len <= 0) return 0;
    const int c = i * B / dca_chunk_len, kc = j * B / dca_chunk_len;
    return kc >= c ? 0 : kc == c - 1 ? 1 : 2;
  }
  __host__ __device__ int rotations() const { return dca_chunk_len > 0 ? 3 : 1; }
  __host__ __device__ int start() const { return ctx - T; }
  __host__ __device__ int row_begin(int i) const { return max(i * B, start()); }
  __host__ __device__ int row_end(int i) const { return min((i + 1) * B, ctx); }
  __host__ __device__ int key_end(int j) const { return min((j + 1) * B, ctx); }
  __host__ __device__ int group() const { return Hq / Hk; }
};

// The geometry of an estimator's arguments (q [T, Hq, D], k_cache [NB, BS, Hk, D], one sequence); with Dual Chunk
// Attention (dca_chunk_len > 0) q [3, T, Hq, D].
inline ChunkGeometry chunk_geometry(const ops::BlockSparsePattern& pattern, const TensorView& q,
                                    const TensorView& k_cache, const AttentionMetadata& meta,
                                    int64_t dca_chunk_len = 0) {
  ChunkGeometry g{};
  const int o = q.ndim() - 3;  // the rotation dimension, if any
  g.T = static_cast<int>(q.dim(o));
  g.ctx = static_cast<int>(meta.max_context_len);
  g.Hq = static_cast<int>(q.dim(o + 1));
  g.Hk = static_cast<int>(k_cache.dim(2));
  g.D = static_cast<int>(q.dim(o + 2));
  g.dca_chunk_len = static_cast<int>(dca_chunk_len);
  g.rot_stride = int64_t{g.T} * g.Hq * g.D;
  g.B = static_cast<int>(pattern.block_size);
  g.BS = static_cast<int>(k_cache.dim(1));
  g.nqb = (g.ctx + g.B - 1) / g.B;
  g.first = g.start() / g.B;
  return g;
}

// The caller's check that q and k_cache match: one float dtype, or (an fp8 cache) bf16 queries.
inline void check_query_and_cache(const char* op, const TensorView& q, const KvCacheTensor& k_cache) {
  if (k_cache.fp8()) {
    NANOVLLM_CHECK(q.dtype() == DType::kBF16, op, ": an fp8 KV cache takes bf16 queries on CUDA, got ",
                   dtype_name(q.dtype()));
    return;
  }
  NANOVLLM_CHECK(q.dtype() == k_cache.dtype(), op, ": q and k_cache must have one dtype, got ", dtype_name(q.dtype()),
                 " and ", dtype_name(k_cache.dtype()));
}

// Empty column lists (counts 0, entries -1) where the pattern has them: only vertical-slash lists columns.
inline void clear_column_lists(const ops::BlockSparsePattern& pattern, cudaStream_t st) {
  if (!pattern.column_counts.defined()) return;
  CUDA_CHECK(cudaMemsetAsync(pattern.column_counts.data(), 0, pattern.column_counts.nbytes(), st));
  CUDA_CHECK(cudaMemsetAsync(pattern.column_index.data(), 0xff, pattern.column_index.nbytes(), st));
}

constexpr int kSelectThreads = 256;
constexpr int kWarps = kSelectThreads / 32;

// Shared scratch of the reductions.
struct Scratch {
  double warp_total[kWarps];
};

// Shared memory of the selections (static, beside Scratch).
using RadixSmem = radix::SmemT<kSelectThreads>;
constexpr int64_t kSelectStaticSmem = sizeof(Scratch) + sizeof(RadixSmem);

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of every thread's v, the same value (same order) in every thread.
__device__ __forceinline__ double block_sum_d(double v, Scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_d(v);
  __syncthreads();  // the previous call's readers are done
  if (lane == 0) sh.warp_total[warp] = v;
  __syncthreads();
  double t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += sh.warp_total[w];
  return t;
}

__device__ __forceinline__ float block_max_f(float v, Scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh.warp_total[warp] = v;
  __syncthreads();
  float t = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t = fmaxf(t, static_cast<float>(sh.warp_total[w]));
  return t;
}

// Exclusive prefix of the threads' v in thread order.
__device__ __forceinline__ double block_exclusive_scan_d(double v, Scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  __syncthreads();
  if (lane == 31) sh.warp_total[warp] = incl;
  __syncthreads();
  double before = 0;
  for (int w = 0; w < warp; ++w) before += sh.warp_total[w];
  return before + incl - v;
}

// Sort key of entry j with mass m >= 0: descending key order = decreasing mass, ties to the lower index.
__device__ __forceinline__ unsigned long long mass_key(float m, int j) {
  return (static_cast<unsigned long long>(__float_as_uint(m)) << 32) | static_cast<unsigned>(~j);
}

// Masses (shares of one softmax, <= 1) as the radix select's integer weights: sums stay exact and far below 2^53; a
// mass rounds by at most 2^-41, so the kept set differs from the CPU's double sums only where the kept mass lands
// within ~n x 2^-41 of threshold x total.
constexpr double kMassFixedScale = 1099511627776.0;  // 2^40

// cover_mass over mass[0, n) with the forced entries 0 and n - 1 (n >= 1): sets flags[j] = 1 for the entries kept
// besides the forced ones (the caller flags those). mass >= 0. The others (1 .. n - 2) by decreasing mass_key while
// the kept mass, the forced included, is below need: a radix select over them for need - forced.
__device__ __forceinline__ void cover_mass(const float* mass, int n, double threshold, uint8_t* flags,
                                           RadixSmem& rs, Scratch& sh) {
  double part = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) part += static_cast<double>(mass[j]);
  const double need = threshold * block_sum_d(part, sh);
  const double forced = static_cast<double>(mass[0]) + (n > 1 ? static_cast<double>(mass[n - 1]) : 0.0);
  const int others = n - 2;  // entries 1 .. n - 2
  if (others <= 0 || forced >= need) return;
  const auto entry = [mass](int64_t e, uint64_t& key, uint64_t& weight) {
    const int j = static_cast<int>(e) + 1;
    key = mass_key(mass[j], j);
    weight = static_cast<uint64_t>(__double2ull_rn(static_cast<double>(mass[j]) * kMassFixedScale));
    return true;
  };
  const radix::Result r = radix::select_top(others, entry, {(need - forced) * kMassFixedScale, false}, rs);
  for (int j = 1 + threadIdx.x; j <= others; j += blockDim.x)
    if (mass_key(mass[j], j) >= r.threshold) flags[j] = 1;
  __syncthreads();
}

// kBlockBudget (estimator_params.h): rank[j] = max(rank[j], mass[j]) for j < n, one query head's masses.
__device__ __forceinline__ void rank_blocks(float* rank, const float* mass, int n) {
  for (int j = threadIdx.x; j < n; j += blockDim.x) rank[j] = fmaxf(rank[j], mass[j]);
  __syncthreads();
}

// kBlockBudget: keeps at most max_blocks (> 0) of flags[0, n) set, the forced 0 and n - 1 first, then the others by
// decreasing rank (ties: the lower index) (cpu PatternSets' limit): a radix select of the top `keep` flagged others.
__device__ __forceinline__ void limit_flagged(uint8_t* flags, const float* rank, int n, int max_blocks, RadixSmem& rs,
                                              Scratch& sh) {
  int local = 0;
  for (int j = 1 + threadIdx.x; j < n - 1; j += blockDim.x) local += flags[j];
  const int count = static_cast<int>(block_sum_d(local, sh)), keep = max(0, max_blocks - (n > 1 ? 2 : 1));
  if (count > keep) {  // the same in every thread
    const auto entry = [flags, rank](int64_t e, uint64_t& key, uint64_t& weight) {
      const int j = static_cast<int>(e) + 1;
      if (!flags[j]) return false;
      key = mass_key(rank[j], j);
      weight = 1;
      return true;
    };
    const radix::Result r = radix::select_top(n - 2, entry, {static_cast<double>(keep), false}, rs);
    __syncthreads();  // every thread's entries were read before any flag changes
    for (int j = 1 + threadIdx.x; j < n - 1; j += blockDim.x)
      if (flags[j] && mass_key(rank[j], j) < r.threshold) flags[j] = 0;
  }
  __syncthreads();
}

// list[0, MAXB) = the flagged key blocks j in [0, n) in increasing order, -1 after them; *count = how many.
__device__ __forceinline__ void write_flagged(const uint8_t* flags, int n, int32_t* list, int32_t* count, int maxb,
                                              Scratch& sh) {
  const int chunk = (n + blockDim.x - 1) / blockDim.x;
  const int j0 = min(n, static_cast<int>(threadIdx.x) * chunk), j1 = min(n, j0 + chunk);
  int local = 0;
  for (int j = j0; j < j1; ++j) local += flags[j];
  int at = static_cast<int>(block_exclusive_scan_d(local, sh));
  const int total = static_cast<int>(block_sum_d(local, sh));
  for (int j = j0; j < j1; ++j)
    if (flags[j] && at < maxb) list[at++] = j;
  for (int r = total + threadIdx.x; r < maxb; r += blockDim.x) list[r] = -1;
  if (threadIdx.x == 0) *count = min(total, maxb);
}

// A query block that needs no estimate (threshold >= 1): every causal block.
__device__ __forceinline__ void write_causal_row(int i, int32_t* list, int32_t* count, int maxb) {
  for (int r = threadIdx.x; r < maxb; r += blockDim.x) list[r] = r > i ? -1 : r;
  if (threadIdx.x == 0) *count = i + 1;
}

}  // namespace nanovllm::cuda_ops::pattern
