// avgpool_estimate on CUDA (contract: kernels/pattern_estimators.h; CPU reference: kernels/cpu/avgpool_estimate.cpp).
// Four launches: the block-mean keys (read through the block table) and the block-mean queries of the chunk into an
// fp32 workspace; the chunk's last query's log-sum-exp per key block (its exact attention share once softmaxed: the
// last query block's scores); then one CTA per (query block, KV head) scores every causal key block for each query
// head of the group, takes the softmax, keeps the cover-mass selection (pattern_select.cuh) and writes the group's
// union.
// Means and scores are computed in the CPU's order without fused multiply-adds, so they are the CPU's bits; only the
// exponential may differ by an ulp, which moves a pick only at a near-tie of two blocks' mass.
// The pooling (pattern_pool.cuh) reads q and the keys once (16-byte loads for bf16); the score loop gives each thread one key block and
// all query heads of a pass, reading the transposed mean keys coalesced (from L2: [D, NQB] per KV head).
// Dual Chunk Attention (q [3, T, Hq, D]): the block-mean queries of each rotation, and a (query block, key block) pair
// is scored with the rotation of its region (ChunkGeometry::region), the last query's logits likewise.
// An fp8 KV cache (bf16 q): the keys are read as code x row scale, one f32 product (kv_fp8.cuh's load_kv_vec), the
// CPU's load_kv_row values, so the means and scores stay the CPU's bits on the fp8 cache too.
#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_pattern_estimators.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/cuda/pattern_pool.cuh"
#include "nanovllm/kernels/cuda/pattern_select.cuh"

namespace nanovllm::cuda_ops {
namespace {

namespace pt = pattern;

constexpr int kMaxHeadsPerPass = 8;  // query heads scored per pass over the mean keys (register accumulators)

using Geometry = pt::ChunkGeometry;

// Dynamic shared memory of select_kernel: heads_per_pass score rows (at offset 0), their mean queries, the block ranks
// (with a block budget), the block flags.
struct SelectSmem {
  int64_t mq_off, rank_off, flags_off, total;
  __host__ __device__ SelectSmem(const Geometry& g, int heads_per_pass, bool ranked) {
    mq_off = 4 * int64_t{heads_per_pass} * g.nqb;
    rank_off = mq_off + 4 * int64_t{g.rotations()} * heads_per_pass * g.D;
    flags_off = rank_off + (ranked ? 4 * int64_t{g.nqb} : 0);
    total = flags_off + (g.nqb + 15) / 16 * 16;
  }
};

// last_scores [Hq, nqb] fp32: per query head and key block j, log sum_{k in block j} exp(scale x q . k) for the chunk's
// last query q (q [T, Hq, D], row T - 1), as the CPU's last_query_scores: each logit an fp32 dot summed over d in
// order without fused multiply-adds, times scale; the block's max, its exponential sum in double.
// One CTA per (key block, KV head), all query heads of the group: the block's keys are read from the cache once,
// coalesced (16 bytes a thread for bf16), kLastTile keys at a time into shared memory as fp32 rows padded to D + 1
// words (a warp's 32 keys at one d fall in 32 banks); a thread keeps one (head, key) dot. This reads every key of the
// context once per chunk (the HBM bound); one CTA per (block, query head) with a key per thread and a dot from global
// memory was latency bound: 7.5 ms of a 256K prefill chunk (H200), 29 ms at 1M.
constexpr int kLastTile = 32;  // keys per shared-memory tile: one per lane

struct LastSmem {  // [G][D] the group's last queries, [kLastTile][D + 1] the key tile, [G][B] the block's logits
  int64_t keys_off, logits_off, total;
  __host__ __device__ explicit LastSmem(const Geometry& g) {
    keys_off = 4 * int64_t{g.group()} * g.D;
    logits_off = keys_off + 4 * int64_t{kLastTile} * (g.D + 1);
    total = logits_off + 4 * int64_t{g.group()} * g.B;
  }
};

// T: q's element type; K: the cache's (uint8_t: fp8 codes with k_scale, read as the CPU's code x scale).
template <typename T, typename K>
__global__ void __launch_bounds__(pt::kSelectThreads)
    last_query_scores_kernel(const T* __restrict__ q, const K* __restrict__ k_cache, const float* __restrict__ k_scale,
                             const int32_t* __restrict__ block_table, float* __restrict__ last_scores, Geometry g,
                             float scale, bool vec) {
  extern __shared__ __align__(16) unsigned char smem[];
  const LastSmem layout(g);
  const int G = g.group(), D = g.D;
  auto* qs = reinterpret_cast<float*>(smem);                        // [G][D]
  auto* ks = reinterpret_cast<float*>(smem + layout.keys_off);      // [kLastTile][D + 1]
  auto* logits = reinterpret_cast<float*>(smem + layout.logits_off);  // [G][B]
  const int h = static_cast<int>(blockIdx.x % g.Hk), j = static_cast<int>(blockIdx.x / g.Hk);
  // (DCA: the rotation of the last query block's region for key block j)
  const T* qrow = q + g.region(g.nqb - 1, j) * g.rot_stride + (int64_t{g.T - 1} * g.Hq + int64_t{h} * G) * D;
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) qs[e] = static_cast<float>(qrow[e]);
  constexpr int kVec = 8;  // elements a thread loads (one vector load for bf16 / fp8 codes: kv_fp8.cuh's load_kv_vec)
  const int per_key = vec ? D / kVec : D;  // loads per key row
  const int p0 = j * g.B, p1 = g.key_end(j);
  for (int t0 = p0; t0 < p1; t0 += kLastTile) {
    const int nk = min(kLastTile, p1 - t0);
    __syncthreads();  // the previous tile's dots are done (and, the first time, the queries are written)
    for (int e = threadIdx.x; e < nk * per_key; e += blockDim.x) {
      const int k = e / per_key, c = e % per_key, p = t0 + k;
      const int64_t slot = int64_t{block_table[p / g.BS]} * g.BS + p % g.BS;
      const int64_t row = slot * g.Hk + h;
      float* dst = ks + k * (D + 1);
      if (vec) {
        float x[kVec];
        load_kv_vec<K, kVec>(k_cache, k_scale, row, D, c * kVec, x);
#pragma unroll
        for (int t = 0; t < kVec; ++t) dst[c * kVec + t] = x[t];
      } else {
        float x[1];
        load_kv_vec<K, 1>(k_cache, k_scale, row, D, c, x);
        dst[c] = x[0];
      }
    }
    __syncthreads();
    const int k = threadIdx.x % kLastTile;
    if (k < nk)
      for (int gi = threadIdx.x / kLastTile; gi < G; gi += blockDim.x / kLastTile) {
        const float* qv = qs + gi * D;
        const float* kv = ks + k * (D + 1);
        float acc = 0.0f;
        for (int d = 0; d < D; ++d) acc = __fadd_rn(acc, __fmul_rn(qv[d], kv[d]));
        logits[gi * g.B + (t0 - p0) + k] = __fmul_rn(scale, acc);
      }
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, n = p1 - p0;
  for (int gi = threadIdx.x / 32; gi < G; gi += blockDim.x / 32) {  // a warp per query head
    const float* l = logits + gi * g.B;
    float m = -INFINITY;
    for (int p = lane; p < n; p += 32) m = fmaxf(m, l[p]);
    m = warp_max(m);
    double part = 0;
    for (int p = lane; p < n; p += 32) part += exp(static_cast<double>(l[p]) - static_cast<double>(m));
    const double sum = pt::warp_sum_d(part);
    if (lane == 0)
      last_scores[(int64_t{h} * G + gi) * g.nqb + j] = static_cast<float>(static_cast<double>(m) + log(sum));
  }
}

template <typename T, typename K>
void launch_last_query_scores(const TensorView& q, const KvCacheTensor& k_cache, const int32_t* block_table,
                              float* last_scores, const Geometry& g, float scale, int smem_optin, cudaStream_t st) {
  const int64_t smem = LastSmem(g).total;
  NANOVLLM_CHECK(smem <= smem_optin, "avgpool_estimate (cuda): the last query's scores of ", g.group(),
                 " query heads over key blocks of ", g.B, " tokens (head_dim ", g.D, ") need ", smem,
                 " bytes of shared memory; the device has ", smem_optin, " per CTA");
  CUDA_CHECK(cudaFuncSetAttribute(last_query_scores_kernel<T, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  const unsigned ctas = static_cast<unsigned>(int64_t{g.Hk} * g.nqb);
  const bool vec = g.D % 8 == 0 && aligned16(k_cache.data());
  const float* k_scale = k_cache.fp8() ? k_cache.scale.data_as<const float>() : nullptr;
  last_query_scores_kernel<T, K><<<ctas, pt::kSelectThreads, static_cast<size_t>(smem), st>>>(
      q.data_as<const T>(), static_cast<const K*>(k_cache.data()), k_scale, block_table, last_scores, g, scale, vec);
  CUDA_CHECK(cudaGetLastError());
}

// One CTA per (query block i of the chunk, KV head h): block_counts[h, i] and block_index[h, i, :] (max_blocks wide),
// at most budget_blocks of them when > 0 (kBlockBudget). The last query block's scores are last_scores' rows.
__global__ void __launch_bounds__(pt::kSelectThreads)
    select_kernel(const float* __restrict__ mean_q, const float* __restrict__ mean_k,
                  const float* __restrict__ last_scores, int32_t* __restrict__ counts, int32_t* __restrict__ index,
                  int max_blocks, Geometry g, float scale, double threshold, int heads_per_pass, int budget_blocks) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ pt::Scratch sh;
  __shared__ pt::RadixSmem rs;
  const int i = g.first + static_cast<int>(blockIdx.x), h = blockIdx.y, n = i + 1;
  int32_t* list = index + (int64_t{h} * g.nqb + i) * max_blocks;
  int32_t* count = counts + int64_t{h} * g.nqb + i;
  if (threshold >= 1) {
    pt::write_causal_row(i, list, count, max_blocks);
    return;
  }
  const bool ranked = budget_blocks > 0;
  const SelectSmem layout(g, heads_per_pass, ranked);
  auto* scores = reinterpret_cast<float*>(smem);                      // [heads_per_pass][nqb]
  auto* mq = reinterpret_cast<float*>(smem + layout.mq_off);          // [rotations][heads_per_pass][D]
  auto* rank = reinterpret_cast<float*>(smem + layout.rank_off);      // [nqb] when ranked
  auto* flags = smem + layout.flags_off;                               // [nqb]
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    flags[j] = (j == 0 || j == i) ? 1 : 0;
    if (ranked) rank[j] = 0.0f;
  }
  const int G = g.group(), qb = i - g.first;
  for (int g0 = 0; g0 < G; g0 += heads_per_pass) {
    const int ng = min(heads_per_pass, G - g0);
    __syncthreads();  // the previous pass's scores and queries are read
    for (int r = 0; r < g.rotations(); ++r)
      for (int e = threadIdx.x; e < ng * g.D; e += blockDim.x) {
        const int qh = h * G + g0 + e / g.D;
        mq[r * heads_per_pass * g.D + e] =
            mean_q[((int64_t{r} * g.Hq + qh) * (g.nqb - g.first) + qb) * g.D + e % g.D];
      }
    __syncthreads();
    // score[gi][j] = scale x (mean query . mean key), the dot summed over d in order (the CPU's dot()); the last query
    // block's: the last query's log-sum-exp per key block.
    if (i == g.nqb - 1) {
      for (int e = threadIdx.x; e < ng * n; e += blockDim.x) {
        const int gi = e / n, j = e % n;
        scores[gi * g.nqb + j] = last_scores[int64_t{h * G + g0 + gi} * g.nqb + j];
      }
    }
    for (int j = threadIdx.x; j < n && i != g.nqb - 1; j += blockDim.x) {
      const float* kcol = mean_k + int64_t{h} * g.D * g.nqb + j;  // [D] at stride nqb
      const float* mqr = mq + g.region(i, j) * heads_per_pass * g.D;  // the pair's rotation
      float acc[kMaxHeadsPerPass] = {};
#pragma unroll 4
      for (int d = 0; d < g.D; ++d) {
        const float k = __ldg(kcol + int64_t{d} * g.nqb);
#pragma unroll
        for (int gi = 0; gi < kMaxHeadsPerPass; ++gi)
          if (gi < ng) acc[gi] = __fadd_rn(acc[gi], __fmul_rn(mqr[gi * g.D + d], k));
      }
#pragma unroll
      for (int gi = 0; gi < kMaxHeadsPerPass; ++gi)
        if (gi < ng) scores[gi * g.nqb + j] = __fmul_rn(scale, acc[gi]);
    }
    __syncthreads();
    for (int gi = 0; gi < ng; ++gi) {
      float* s = scores + gi * g.nqb;
      // Softmax as cpu::softmax: max-subtracted exponentials, their sum in double, each divided by it.
      float m = -INFINITY;
      for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j]);
      m = pt::block_max_f(m, sh);
      double part = 0;
      for (int j = threadIdx.x; j < n; j += blockDim.x) {
        s[j] = expf(s[j] - m);
        part += static_cast<double>(s[j]);
      }
      const double sum = pt::block_sum_d(part, sh);
      for (int j = threadIdx.x; j < n; j += blockDim.x) s[j] = static_cast<float>(static_cast<double>(s[j]) / sum);
      __syncthreads();
      pt::cover_mass(s, n, threshold, flags, rs, sh);
      if (ranked) pt::rank_blocks(rank, s, n);
    }
  }
  __syncthreads();
  if (ranked) pt::limit_flagged(flags, rank, n, budget_blocks, rs, sh);
  pt::write_flagged(flags, n, list, count, max_blocks, sh);
}

struct AvgPoolTag;  // the op's grow-only workspace (op_workspace.h): the mean keys and queries

}  // namespace

void avgpool_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                      const AttentionMetadata& meta, float scale, const ops::AvgPoolParams& params,
                      const ops::DualChunkParams* dca, ops::Stream s) {
  constexpr const char* op = "avgpool_estimate (cuda)";
  const cudaStream_t st = stream_of(s);
  const Geometry g = pt::chunk_geometry(pattern, q, k_cache, meta, dca != nullptr ? dca->chunk_len : 0);
  const int max_blocks = static_cast<int>(pattern.block_index.dim(2));
  pt::clear_column_lists(pattern, st);
  const bool full = params.threshold >= 1;
  // Heads per pass: the whole group (up to kMaxHeadsPerPass) unless its score rows overflow shared memory.
  const int optin = context_of(s).smem_optin();
  const int64_t static_bytes = pt::kSelectStaticSmem;
  int heads = std::min(g.group(), kMaxHeadsPerPass);
  const bool ranked = params.max_blocks > 0;
  while (heads > 1 && SelectSmem(g, heads, ranked).total + static_bytes > optin) --heads;
  const int64_t smem = full ? 0 : SelectSmem(g, heads, ranked).total;
  NANOVLLM_CHECK(smem + static_bytes <= optin, op, ": ", g.nqb, " query blocks of ", g.B,
                 " tokens need more shared memory than the device's ", optin, " bytes per CTA (use larger blocks)");
  const int nqc = g.nqb - g.first;  // query blocks of the chunk
  float* mean_k = nullptr;
  float* mean_q = nullptr;
  float* last_scores = nullptr;
  if (!full) {
    const size_t k_floats = static_cast<size_t>(g.Hk) * g.nqb * g.D;
    const size_t q_floats = static_cast<size_t>(g.rotations()) * g.Hq * nqc * g.D;
    const size_t last_floats = static_cast<size_t>(g.Hq) * g.nqb;
    mean_k = reinterpret_cast<float*>(
        op_workspace<AvgPoolTag>((k_floats + q_floats + last_floats) * sizeof(float), s));
    mean_q = mean_k + k_floats;
    last_scores = mean_q + q_floats;
    const int32_t* table = meta.block_tables.data_as<const int32_t>();
    pt::launch_pooling(op, q, k_cache, table, mean_q, mean_k, g, st);
    // launch_pooling checked the cache is q's dtype or fp8 (then q is bf16).
    if (k_cache.fp8()) {
      launch_last_query_scores<__nv_bfloat16, uint8_t>(q, k_cache, table, last_scores, g, scale, optin, st);
    } else if (q.dtype() == DType::kBF16) {
      launch_last_query_scores<__nv_bfloat16, __nv_bfloat16>(q, k_cache, table, last_scores, g, scale, optin, st);
    } else if (q.dtype() == DType::kF16) {
      launch_last_query_scores<__half, __half>(q, k_cache, table, last_scores, g, scale, optin, st);
    } else {
      launch_last_query_scores<float, float>(q, k_cache, table, last_scores, g, scale, optin, st);
    }
  }
  CUDA_CHECK(cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  select_kernel<<<dim3(nqc, g.Hk), pt::kSelectThreads, static_cast<size_t>(smem), st>>>(
      mean_q, mean_k, last_scores, pattern.block_counts.data_as<int32_t>(), pattern.block_index.data_as<int32_t>(),
      max_blocks, g, scale, params.threshold, heads, static_cast<int>(params.max_blocks));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nanovllm::cuda_ops
