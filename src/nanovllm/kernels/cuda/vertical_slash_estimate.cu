// vertical_slash_estimate on CUDA (contract: kernels/pattern_estimators.h; CPU reference:
// kernels/cpu/vertical_slash_estimate.cpp). Seven launches, no host synchronisation:
//   1-4. last_queries_attention.cuh: per query head, the chunk's last `last_q` queries' causal softmax summed per key
//        position (vertical) and per diagonal (slash), fp32 sums (tensor-core scores);
//   5. select: one CTA per (query head, vertical or slash) finds, by a radix select (radix_select.cuh), the key of its
//      `vertical`-th best column (`slash`-th best diagonal), sinks (recent diagonals) forced as +inf, ties to the
//      lower index: the CPU's top_indices;
//   6. union: one CTA per KV head marks the columns and diagonals some query head of its group chose, as prefix counts
//      over positions, and lists the chosen columns in increasing order;
//   7. write: one CTA per (query block of the chunk, KV head) lists the key blocks whose rectangle one of the chosen
//      diagonals crosses (a prefix-count difference per block), plus the sink and the diagonal block, then the chosen
//      columns before the block that those blocks do not hold (-1 after them, as the CPU writes).
// At 128K tokens (Qwen3-4B heads, last_q 64) the score tiles read the keys twice and run 2 x 69 GFLOP of bf16 MMA;
// the selection re-reads 2 x 32 x 128K sums six times; the write is bound by the column lists' width (MAXC, the caller's
// choice: vertical_slash_max_columns, up to 4 x 7864 at the adaptive default), which it fills with -1.
#include <algorithm>
#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_pattern_estimators.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/last_queries_attention.cuh"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/cuda/pattern_select.cuh"
#include "nanovllm/kernels/cuda/radix_select.cuh"

namespace nanovllm::cuda_ops {
namespace {

namespace pt = pattern;

// The selection key of position k of a query head's sums (vertical: key k; slash: diagonal k): the sum, +inf for the
// forced positions k < forced, above; ~k below. Decreasing keys = decreasing sums, ties to the lower index.
__device__ __forceinline__ uint64_t pick_key(const float* sums, int k, int forced) {
  const float v = k < forced ? INFINITY : sums[k];
  return (uint64_t{__float_as_uint(v)} << 32) | ~static_cast<uint32_t>(k);
}

// thresholds [Hq, 2]: query head qh chose the columns k with pick_key(vertical[qh], k, sink) >= thresholds[qh, 0] and
// the diagonals d with pick_key(slash[qh], d, recent) >= thresholds[qh, 1]. blockIdx (qh, 0: columns / 1: diagonals).
__global__ void __launch_bounds__(radix::kThreads)
    select_kernel(const float* __restrict__ vertical, const float* __restrict__ slash, int ctx, int64_t columns,
                  int64_t diagonals, int sink, int recent, uint64_t* __restrict__ thresholds) {
  __shared__ radix::Smem sm;
  const int qh = blockIdx.x, which = blockIdx.y;
  const float* sums = (which == 0 ? vertical : slash) + int64_t{qh} * ctx;
  const int forced = which == 0 ? sink : recent;
  const auto entry = [sums, forced](int64_t i, uint64_t& key, uint64_t& weight) {
    key = pick_key(sums, static_cast<int>(i), forced);
    weight = 1;
    return true;
  };
  const double count = static_cast<double>(which == 0 ? columns : diagonals);
  const radix::Result r = radix::select_top(ctx, entry, {count, false}, sm);
  if (threadIdx.x == 0) thresholds[qh * 2 + which] = r.threshold;
}

constexpr int kUnionThreads = 512;
constexpr int kUnionPer = 4;  // consecutive positions per thread

// Per KV head h (one CTA): slash_prefix [Hk, ctx + 1] and vert_prefix [Hk, ctx + 1] = how many diagonals / columns
// before x some query head of the group chose; vert_list [Hk, ctx] = the chosen columns, increasing.
__global__ void __launch_bounds__(kUnionThreads)
    union_kernel(const float* __restrict__ vertical, const float* __restrict__ slash,
                 const uint64_t* __restrict__ thresholds, int ctx, int group, int sink, int recent,
                 int32_t* __restrict__ slash_prefix, int32_t* __restrict__ vert_prefix,
                 int32_t* __restrict__ vert_list) {
  using Scan = cub::BlockScan<int, kUnionThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int h = blockIdx.x;
  int32_t* sp = slash_prefix + int64_t{h} * (ctx + 1);
  int32_t* vp = vert_prefix + int64_t{h} * (ctx + 1);
  int32_t* vl = vert_list + int64_t{h} * ctx;
  int s_base = 0, v_base = 0;  // chosen before this pass's positions
  for (int x0 = 0; x0 < ctx; x0 += kUnionThreads * kUnionPer) {
    const int first = x0 + static_cast<int>(threadIdx.x) * kUnionPer;
    bool s_pick[kUnionPer], v_pick[kUnionPer];
    int s_count = 0, v_count = 0;
#pragma unroll
    for (int t = 0; t < kUnionPer; ++t) {
      const int x = first + t;
      s_pick[t] = v_pick[t] = false;
      for (int gi = 0; gi < group && x < ctx; ++gi) {
        const int qh = h * group + gi;
        s_pick[t] = s_pick[t] || pick_key(slash + int64_t{qh} * ctx, x, recent) >= thresholds[qh * 2 + 1];
        v_pick[t] = v_pick[t] || pick_key(vertical + int64_t{qh} * ctx, x, sink) >= thresholds[qh * 2];
      }
      s_count += s_pick[t];
      v_count += v_pick[t];
    }
    int s_before = 0, s_total = 0, v_before = 0, v_total = 0;
    Scan(scan).ExclusiveSum(s_count, s_before, s_total);
    __syncthreads();  // the scan storage is reused
    Scan(scan).ExclusiveSum(v_count, v_before, v_total);
    __syncthreads();
    int s_at = s_base + s_before, v_at = v_base + v_before;
#pragma unroll
    for (int t = 0; t < kUnionPer; ++t) {
      const int x = first + t;
      if (x >= ctx) break;
      sp[x] = s_at;
      vp[x] = v_at;
      if (v_pick[t]) vl[v_at] = x;
      s_at += s_pick[t];
      v_at += v_pick[t];
    }
    s_base += s_total;
    v_base += v_total;
  }
  if (threadIdx.x == 0) {
    sp[ctx] = s_base;
    vp[ctx] = v_base;
  }
}

constexpr int kColumnsPer = 4;  // candidate columns per thread and pass of the write

// One CTA per (query block i of the chunk, KV head h): block_counts[h, i] / block_index[h, i, :] (max_blocks wide) and
// column_counts[h, i] / column_index[h, i, :] (max_columns wide).
__global__ void __launch_bounds__(pt::kSelectThreads)
    write_kernel(const int32_t* __restrict__ slash_prefix, const int32_t* __restrict__ vert_prefix,
                 const int32_t* __restrict__ vert_list, pt::ChunkGeometry g, int32_t* __restrict__ counts,
                 int32_t* __restrict__ index, int max_blocks, int32_t* __restrict__ column_counts,
                 int32_t* __restrict__ column_index, int max_columns) {
  extern __shared__ uint8_t flags[];  // [nqb]: key block listed
  __shared__ pt::Scratch sh;
  const int i = g.first + static_cast<int>(blockIdx.x), h = blockIdx.y, n = i + 1, tid = threadIdx.x;
  const int r0 = g.row_begin(i), r1 = g.row_end(i);
  const int32_t* sp = slash_prefix + int64_t{h} * (g.ctx + 1);
  for (int j = tid; j < n; j += blockDim.x) {
    // Diagonal d meets rows [r0, r1) at keys [r0 - d, r1 - 1 - d]: some of them in key block j iff d in [lo, hi].
    const int lo = max(0, r0 - (j + 1) * g.B + 1), hi = r1 - 1 - j * g.B;
    flags[j] = j == 0 || j == i || (hi >= lo && sp[hi + 1] > sp[lo]);
  }
  __syncthreads();
  const int64_t row = int64_t{h} * g.nqb + i;
  pt::write_flagged(flags, n, index + row * max_blocks, counts + row, max_blocks, sh);
  // The chosen columns before iB (vert_list's first `candidates`), those outside the listed blocks, in order.
  const int candidates = vert_prefix[int64_t{h} * (g.ctx + 1) + int64_t{i} * g.B];
  const int32_t* vl = vert_list + int64_t{h} * g.ctx;
  int32_t* list = column_index + row * max_columns;
  int written = 0;
  for (int base = 0; base < candidates; base += pt::kSelectThreads * kColumnsPer) {
    int k[kColumnsPer], keep = 0;
#pragma unroll
    for (int t = 0; t < kColumnsPer; ++t) {
      const int at = base + tid * kColumnsPer + t;
      k[t] = at < candidates ? vl[at] : -1;
      if (k[t] >= 0 && flags[k[t] / g.B]) k[t] = -1;
      keep += k[t] >= 0;
    }
    int at = written + static_cast<int>(pt::block_exclusive_scan_d(keep, sh));
    written += static_cast<int>(pt::block_sum_d(keep, sh));
#pragma unroll
    for (int t = 0; t < kColumnsPer; ++t)
      if (k[t] >= 0) {
        if (at < max_columns) list[at] = k[t];
        ++at;
      }
  }
  for (int r = written + tid; r < max_columns; r += blockDim.x) list[r] = -1;
  if (tid == 0) column_counts[row] = min(written, max_columns);
}

// The op's workspace: the attention sums, the thresholds, the group's prefix counts and column list.
struct Layout {
  lastq::Buffers<float> att;
  uint64_t* thresholds;   // [Hq, 2]
  int32_t* slash_prefix;  // [Hk, ctx + 1]
  int32_t* vert_prefix;   // [Hk, ctx + 1]
  int32_t* vert_list;     // [Hk, ctx]
  Layout(WorkspaceCarver& ws, const lastq::Geometry& g)
      : att(ws, g),
        thresholds(ws.take<uint64_t>(static_cast<size_t>(g.Hq) * 2)),
        slash_prefix(ws.take<int32_t>(static_cast<size_t>(g.Hk) * (g.ctx + 1))),
        vert_prefix(ws.take<int32_t>(static_cast<size_t>(g.Hk) * (g.ctx + 1))),
        vert_list(ws.take<int32_t>(static_cast<size_t>(g.Hk) * g.ctx)) {}
};

struct VerticalSlashTag {};

}  // namespace

void vertical_slash_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                             const AttentionMetadata& meta, float scale, const ops::VerticalSlashParams& params,
                             const ops::DualChunkParams* dca, ops::Stream s) {
  constexpr const char* op = "vertical_slash_estimate (cuda)";
  const cudaStream_t st = stream_of(s);
  // Dual Chunk Attention: q [3, T, Hq, D]; its rows are scored in the rotation of each key tile's region
  // (last_queries_attention.cuh), so the chunk must hold whole key tiles.
  const int64_t dca_len = dca != nullptr ? dca->chunk_len : 0;
  NANOVLLM_CHECK(dca_len % lastq::kKeys == 0, op, ": Dual Chunk Attention's chunk length ", dca_len,
                 " must be a multiple of ", lastq::kKeys);
  const pt::ChunkGeometry g = pt::chunk_geometry(pattern, q, k_cache, meta, dca_len);
  pt::check_query_and_cache(op, q, k_cache);
  NANOVLLM_CHECK(g.D <= lastq::kMaxDim, op, ": head_dim ", g.D, " is above the kernel's ", lastq::kMaxDim);
  const lastq::Geometry lg =
      lastq::make_geometry(q, k_cache, g.ctx, std::min<int64_t>(params.last_q, g.T), scale, dca_len);
  const int optin = context_of(s).smem_optin();
  const size_t tile_smem = lastq::tile_smem(lg, true), flags_smem = static_cast<size_t>(g.nqb);
  NANOVLLM_CHECK(tile_smem <= static_cast<size_t>(optin) &&
                     flags_smem + sizeof(pt::Scratch) <= static_cast<size_t>(optin),
                 op, ": head_dim ", g.D, " with ", g.nqb, " query blocks needs more shared memory than the device's ",
                 optin, " bytes per CTA");
  WorkspaceCarver sizer;
  static_cast<void>(Layout(sizer, lg));
  WorkspaceCarver carver(op_workspace<VerticalSlashTag>(sizer.total(), s));
  const Layout w(carver, lg);

  const int32_t* bt = meta.block_tables.data_as<const int32_t>();
  lastq::run<float, false>(q, k_cache, bt, lg, w.att, st);
  const int64_t columns = std::min<int64_t>(params.vertical, g.ctx), diagonals = std::min<int64_t>(params.slash, g.ctx);
  const int sink = static_cast<int>(std::min<int64_t>(params.sink_tokens, g.ctx));
  const int recent = static_cast<int>(std::min<int64_t>(params.recent_diagonals, g.ctx));
  select_kernel<<<dim3(g.Hq, 2), radix::kThreads, 0, st>>>(w.att.vertical, w.att.slash, g.ctx, columns, diagonals,
                                                            sink, recent, w.thresholds);
  CUDA_CHECK(cudaGetLastError());
  union_kernel<<<g.Hk, kUnionThreads, 0, st>>>(w.att.vertical, w.att.slash, w.thresholds, g.ctx, g.group(), sink,
                                                recent, w.slash_prefix, w.vert_prefix, w.vert_list);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaFuncSetAttribute(write_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(flags_smem)));
  write_kernel<<<dim3(g.nqb - g.first, g.Hk), pt::kSelectThreads, flags_smem, st>>>(
      w.slash_prefix, w.vert_prefix, w.vert_list, g, pattern.block_counts.data_as<int32_t>(),
      pattern.block_index.data_as<int32_t>(), static_cast<int>(pattern.block_index.dim(2)),
      pattern.column_counts.data_as<int32_t>(), pattern.column_index.data_as<int32_t>(),
      static_cast<int>(pattern.column_index.dim(2)));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace nanovllm::cuda_ops
