// xattention_estimate on CUDA (contract: kernels/pattern_estimators.h; CPU reference:
// kernels/cpu/xattention_estimate.cpp).
// The antidiagonal sum of tile (m, n) is one dot product of S D elements: the tile's S queries in reverse order,
// concatenated, against its S keys in order. So per query head the tile scores are a GEMM: Qr [tile rows, S D] times
// Kt [tile columns, S D]^T, run through the linear op (cuBLASLt, bf16 in, fp32 accumulate and out) on the tensor cores.
// Per KV head: gather its keys into Kt (bf16, zeros past the context); per query head of the group: gather Qr (zeros
// outside the chunk), then in slabs of query blocks (bounded score memory): the GEMM over the causal columns, and one
// CTA per query block takes each tile row's softmax and sums it per key block (fp32 masses, summed in double). Last,
// one CTA per query block selects as the CPU does (pattern_select.cuh) over the group's masses and writes the union.
// The scores differ from the CPU's fp32 dot products by rounding only (other summation order; q and keys rounded to
// bf16 first when they are F32 / F16), so picks agree except at near-ties. Causal waste: the GEMM of a slab computes
// its whole rectangle up to the slab's last column.
// Dual Chunk Attention (q [3, T, Hq, D]): a tile row's queries and a tile column's keys each lie in one chunk (the
// stride divides the block, which divides the chunk), so a tile is scored in the rotation of its region: Qr is gathered
// and the GEMM run once per rotation, and the mass kernel reads each tile's score from its region's product (three
// times the GEMM work; the slabs shrink to keep the score memory).
// An fp8 KV cache: Kt is gathered as bf16(code x row scale) (kv_fp8.cuh), the value the CPU reads (f32 code x scale)
// rounded to the GEMM's bf16 like any F32 key.
#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/cuda_pattern_estimators.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/cuda/pattern_select.cuh"

namespace nanovllm::cuda_ops {
namespace {

namespace pt = pattern;

constexpr int kThreads = 256;
constexpr int64_t kScoreSlabBytes = int64_t{256} << 20;  // fp32 tile scores of one slab of query blocks

// The chunk's geometry (cpu::PrefillChunk's) and the tiles: tile rows [m0, m1) cover the chunk's queries, tile columns
// [0, nt) the keys.
struct Geometry : pt::ChunkGeometry {
  int S, m0, m1, nt;
  __host__ __device__ int nqc() const { return nqb - first; }
  __host__ __device__ int64_t width() const { return int64_t{S} * D; }  // elements of a tile's concatenation
};

// kt [nt S, D] bf16 (= [nt, S D]): KV head h's keys at positions [0, nt S) read through block_table, zeros past ctx.
// k_scale set: an fp8 cache (codes [NB, BS, Hk, D], scales [NB, BS, Hk]), each key code x scale.
__global__ void gather_keys_kernel(const void* __restrict__ k_cache, int k_dtype, const float* __restrict__ k_scale,
                                   const int32_t* __restrict__ block_table, __nv_bfloat16* __restrict__ kt, int h,
                                   Geometry g) {
  const int p = blockIdx.x;
  const int64_t slot = p < g.ctx ? int64_t{block_table[p / g.BS]} * g.BS + p % g.BS : -1;
  const int64_t row = slot * g.Hk + h;
  for (int d = threadIdx.x; d < g.D; d += blockDim.x) {
    float v = 0.0f;
    if (slot >= 0 && k_scale != nullptr) {
      v = __fmul_rn(fp8_e4m3_value(static_cast<const uint8_t*>(k_cache)[row * g.D + d]), k_scale[row]);
    } else if (slot >= 0) {
      v = load_f32(k_cache, k_dtype, row * g.D + d);
    }
    kt[int64_t{p} * g.D + d] = __float2bfloat16_rn(v);
  }
}

// qr [m1 - m0, S D] bf16: row m - m0 holds query head qh's rows at positions m S + S - 1 - s for s = 0 .. S - 1
// (reversed: the antidiagonal), zeros for positions outside the chunk [start, ctx); of q's rotation `rot` (DCA).
__global__ void gather_queries_kernel(const void* __restrict__ q, int q_dtype, __nv_bfloat16* __restrict__ qr, int qh,
                                      Geometry g, int rot) {
  const int m = g.m0 + static_cast<int>(blockIdx.x);
  for (int64_t e = threadIdx.x; e < g.width(); e += blockDim.x) {
    const int s = static_cast<int>(e / g.D), d = static_cast<int>(e % g.D);
    const int pos = m * g.S + g.S - 1 - s;
    const bool in = pos >= g.start() && pos < g.ctx;
    qr[int64_t{blockIdx.x} * g.width() + e] = __float2bfloat16_rn(
        in ? load_f32(q, q_dtype, rot * g.rot_stride + (int64_t{pos - g.start()} * g.Hq + qh) * g.D + d) : 0.0f);
  }
}

// One CTA per query block i of the slab [qb0, ...): for each of its tile rows m (scores row m - row0 of `scores`, ld
// ncols), the softmax of tile_scale x the row over its causal tiles n <= m, summed per key block (n S / B) in double
// over the block's rows; mass[i - first, j] (fp32, [nqc, nqb] for this query head) for j <= i. DCA: scores holds the
// rotations' products one after the other (rot_elems apart), and tile (m, n) is read from its region's (the region
// of query block i and key block n S / B).
__global__ void __launch_bounds__(kThreads)
    tile_mass_kernel(const float* __restrict__ scores, int64_t ncols, int row0, int qb0, float* __restrict__ mass,
                     Geometry g, float tile_scale, int64_t rot_elems) {
  extern __shared__ double acc[];  // [nqb]
  __shared__ pt::Scratch sh;
  const int i = qb0 + static_cast<int>(blockIdx.x);
  const int per_block = g.B / g.S;  // tile columns per key block
  for (int j = threadIdx.x; j <= i; j += blockDim.x) acc[j] = 0.0;
  for (int m = g.row_begin(i) / g.S; m * g.S < g.row_end(i); ++m) {
    const float* base = scores + int64_t{m - row0} * ncols;
    // (the tile's region is that of query block i against key block c S / B)
    const auto tile = [&](int c) { return base[g.region(i, c * g.S / g.B) * rot_elems + c]; };
    const int n = m + 1;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < n; c += blockDim.x) mx = fmaxf(mx, __fmul_rn(tile(c), tile_scale));
    mx = pt::block_max_f(mx, sh);
    double part = 0;
    for (int c = threadIdx.x; c < n; c += blockDim.x)
      part += static_cast<double>(expf(__fmul_rn(tile(c), tile_scale) - mx));
    const double sum = pt::block_sum_d(part, sh);
    for (int j = threadIdx.x; j * per_block < n; j += blockDim.x) {
      double a = 0;
      for (int c = j * per_block; c < min(n, (j + 1) * per_block); ++c)
        a += static_cast<double>(
            static_cast<float>(static_cast<double>(expf(__fmul_rn(tile(c), tile_scale) - mx)) / sum));
      acc[j] += a;  // the same thread owns j for every row
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j <= i; j += blockDim.x)
    mass[int64_t{i - g.first} * g.nqb + j] = static_cast<float>(acc[j]);
}

// One CTA per query block i of the chunk, KV head h: the cover-mass selection of each query head's masses
// (mass [G, nqc, nqb]), their union written to block_counts[h, i] / block_index[h, i, :], at most budget_blocks of them when > 0
// (kBlockBudget).
__global__ void __launch_bounds__(pt::kSelectThreads)
    select_kernel(const float* __restrict__ mass, int32_t* __restrict__ counts, int32_t* __restrict__ index,
                  int max_blocks, int h, Geometry g, double threshold, int budget_blocks) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ pt::Scratch sh;
  __shared__ pt::RadixSmem rs;
  const int i = g.first + static_cast<int>(blockIdx.x), n = i + 1;
  int32_t* list = index + (int64_t{h} * g.nqb + i) * max_blocks;
  int32_t* count = counts + int64_t{h} * g.nqb + i;
  if (threshold >= 1) {
    pt::write_causal_row(i, list, count, max_blocks);
    return;
  }
  auto* row = reinterpret_cast<float*>(smem);                           // [nqb]
  auto* rank = reinterpret_cast<float*>(smem + 4 * int64_t{g.nqb});    // [nqb] when ranked
  const bool ranked = budget_blocks > 0;
  auto* flags = smem + 4 * int64_t{g.nqb} * (ranked ? 2 : 1);          // [nqb]
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    flags[j] = (j == 0 || j == i) ? 1 : 0;
    if (ranked) rank[j] = 0.0f;
  }
  for (int gi = 0; gi < g.group(); ++gi) {
    __syncthreads();  // the previous head's row is read
    for (int j = threadIdx.x; j < n; j += blockDim.x)
      row[j] = mass[(int64_t{gi} * g.nqc() + i - g.first) * g.nqb + j];
    __syncthreads();
    pt::cover_mass(row, n, threshold, flags, rs, sh);
    if (ranked) pt::rank_blocks(rank, row, n);
  }
  __syncthreads();
  if (ranked) pt::limit_flagged(flags, rank, n, budget_blocks, rs, sh);
  pt::write_flagged(flags, n, list, count, max_blocks, sh);
}

// One head's mass row, the block ranks (ranked: a block budget), the flags.
int64_t select_smem(const Geometry& g, bool ranked) {
  return 4 * int64_t{g.nqb} * (ranked ? 2 : 1) + (g.nqb + 15) / 16 * 16;
}

struct XAttentionTag;  // the op's grow-only workspace (op_workspace.h)

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

void xattention_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                         const AttentionMetadata& meta, float scale, const ops::XAttentionParams& params,
                         const ops::DualChunkParams* dca, ops::Stream s) {
  constexpr const char* op = "xattention_estimate (cuda)";
  const cudaStream_t st = stream_of(s);
  Geometry g{};
  static_cast<pt::ChunkGeometry&>(g) =
      pt::chunk_geometry(pattern, q, k_cache, meta, dca != nullptr ? dca->chunk_len : 0);
  const int R = g.rotations();
  g.S = static_cast<int>(params.stride);
  g.m0 = g.start() / g.S;
  g.m1 = (g.ctx + g.S - 1) / g.S;
  g.nt = g.m1;
  const int max_blocks = static_cast<int>(pattern.block_index.dim(2));
  pt::clear_column_lists(pattern, st);
  const int optin = context_of(s).smem_optin();
  const int64_t sel_smem = params.threshold >= 1 ? 0 : select_smem(g, params.max_blocks > 0);
  const int64_t mass_smem = 8 * int64_t{g.nqb};
  const int64_t scratch = static_cast<int64_t>(sizeof(pt::Scratch));
  NANOVLLM_CHECK(std::max(sel_smem + pt::kSelectStaticSmem, mass_smem + scratch) <= optin, op, ": ", g.nqb,
                 " query blocks of ", g.B, " tokens need more shared memory than the device's ", optin,
                 " bytes per CTA (use larger blocks)");
  CUDA_CHECK(cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(sel_smem)));
  if (params.threshold >= 1) {
    for (int h = 0; h < g.Hk; ++h) {
      select_kernel<<<g.nqc(), pt::kSelectThreads, 0, st>>>(nullptr, pattern.block_counts.data_as<int32_t>(),
                                                           pattern.block_index.data_as<int32_t>(), max_blocks, h, g,
                                                           params.threshold, 0);
      CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  // Slabs of query blocks whose tile-score rows (up to the slab's last causal column) fit kScoreSlabBytes.
  const int rows_per_block = g.B / g.S;
  const int slab_blocks = static_cast<int>(std::max<int64_t>(
      1, kScoreSlabBytes / (int64_t{R} * rows_per_block * g.nt * static_cast<int64_t>(sizeof(float)))));
  const size_t kt_bytes = align256(static_cast<size_t>(g.nt) * g.width() * 2);
  const size_t qr_one = align256(static_cast<size_t>(g.m1 - g.m0) * g.width() * 2);  // one rotation's Qr
  const size_t qr_bytes = R * qr_one;
  const size_t score_one =  // one rotation's slab of scores
      align256(static_cast<size_t>(std::min(slab_blocks, g.nqc())) * rows_per_block * g.nt * sizeof(float));
  const size_t score_bytes = R * score_one;
  const size_t mass_bytes = align256(static_cast<size_t>(g.group()) * g.nqc() * g.nqb * sizeof(float));
  unsigned char* ws = op_workspace<XAttentionTag>(kt_bytes + qr_bytes + score_bytes + mass_bytes, s);
  auto* kt = reinterpret_cast<__nv_bfloat16*>(ws);
  auto* qr = reinterpret_cast<__nv_bfloat16*>(ws + kt_bytes);
  auto* scores = reinterpret_cast<float*>(ws + kt_bytes + qr_bytes);
  auto* mass = reinterpret_cast<float*>(ws + kt_bytes + qr_bytes + score_bytes);
  const Device dev = q.device();
  const float tile_scale = scale / static_cast<float>(g.S);
  const float* k_scale = k_cache.fp8() ? k_cache.scale.data_as<const float>() : nullptr;
  CUDA_CHECK(cudaFuncSetAttribute(tile_mass_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(mass_smem)));
  for (int h = 0; h < g.Hk; ++h) {
    gather_keys_kernel<<<g.nt * g.S, 128, 0, st>>>(k_cache.data(), dt(k_cache), k_scale,
                                                   meta.block_tables.data_as<const int32_t>(), kt, h, g);
    CUDA_CHECK(cudaGetLastError());
    for (int gi = 0; gi < g.group(); ++gi) {
      for (int r = 0; r < R; ++r) {
        gather_queries_kernel<<<g.m1 - g.m0, kThreads, 0, st>>>(
            q.data(), dt(q), reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<unsigned char*>(qr) + r * qr_one),
            h * g.group() + gi, g, r);
        CUDA_CHECK(cudaGetLastError());
      }
      for (int qb0 = g.first; qb0 < g.nqb; qb0 += slab_blocks) {
        const int qb1 = std::min(g.nqb, qb0 + slab_blocks);
        const int row0 = std::max(g.m0, qb0 * rows_per_block), row1 = std::min(g.m1, qb1 * rows_per_block);
        const int64_t ncols = row1;  // causal: tile columns n <= m < row1
        for (int r = 0; r < R; ++r) {  // DCA: each rotation's product, score_one apart
          auto* qr_r = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<unsigned char*>(qr) + r * qr_one);
          auto* scores_r = reinterpret_cast<unsigned char*>(scores) + r * score_one;
          cuda_ops::linear(
              TensorView(scores_r, DType::kF32, {row1 - row0, ncols}, dev),
              TensorView(qr_r + int64_t{row0 - g.m0} * g.width(), DType::kBF16, {row1 - row0, g.width()}, dev),
              TensorView(kt, DType::kBF16, {ncols, g.width()}, dev), TensorView(), s, ops::LinearHint::kNone);
        }
        tile_mass_kernel<<<qb1 - qb0, kThreads, static_cast<size_t>(mass_smem), st>>>(
            scores, ncols, row0, qb0, mass + int64_t{gi} * g.nqc() * g.nqb, g, tile_scale,
            static_cast<int64_t>(score_one / sizeof(float)));
        CUDA_CHECK(cudaGetLastError());
      }
    }
    select_kernel<<<g.nqc(), pt::kSelectThreads, static_cast<size_t>(sel_smem), st>>>(
        mass, pattern.block_counts.data_as<int32_t>(), pattern.block_index.data_as<int32_t>(), max_blocks, h, g,
        params.threshold, static_cast<int>(params.max_blocks));
    CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace nanovllm::cuda_ops
