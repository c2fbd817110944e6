// Pattern estimator entry points: validate the chunk, the cache, the pattern views and the knobs, then dispatch (CPU
// reference kernels, or the CUDA kernels of kernels/cuda/*_estimate.cu).
#include "nanovllm/kernels/pattern_estimators.h"

#include <cmath>
#include <string_view>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cpu/cpu_pattern_estimators.h"
#include "nanovllm/kernels/cuda/cuda_pattern_estimators.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {
namespace {

// [Hk, NQB] counts and [Hk, NQB, width >= min_width] lists, i32 on dev.
void check_lists(std::string_view op, std::string_view counts_name, const TensorView& counts,
                 std::string_view index_name, const TensorView& index, int64_t Hk, int64_t NQB, int64_t min_width,
                 Device dev) {
  check_i32_tensor(op, counts_name, counts, dev, {Hk, NQB});
  check_tensor(op, index_name, index, dev, 3);
  check_i32(op, index_name, index);
  NANOVLLM_CHECK(index.dim(0) == Hk && index.dim(1) == NQB && index.dim(2) >= min_width, op, ": ", index_name, " ",
                 index.shape().str(), " must be [", Hk, ", ", NQB, ", >= ", min_width,
                 "] (KV heads, query blocks, list width)");
}

// The common arguments (pattern_estimators.h); returns the chunk's geometry. `needs_columns`: the column lists must be
// given (otherwise they may be undefined).
// `dca`: Dual Chunk Attention's q [3, T, Hq, D] (checked here; the geometry is its rotations').
cpu::PrefillChunk check_estimate(std::string_view op, const BlockSparsePattern& pattern, const TensorView& q3,
                                 const KvCacheTensor& k_cache, const AttentionMetadata& meta, float scale,
                                 const DualChunkParams* dca, bool needs_columns = false) {
  const Device dev = q3.device();
  TensorView q = q3;
  if (dca != nullptr) {
    check_tensor(op, "q", q3, dev, 4);
    NANOVLLM_CHECK(q3.dim(0) == 3, op, ": q ", q3.shape().str(),
                   " must be [3, T, Hq, D] with Dual Chunk Attention (intra, successive, inter)");
    NANOVLLM_CHECK(dca->chunk_len >= 1 && dca->chunk_len % pattern.block_size == 0, op, ": the pattern block size ",
                   pattern.block_size, " must divide Dual Chunk Attention's chunk length ", dca->chunk_len,
                   " (chunk_size - local_size)");
    NANOVLLM_CHECK(dev.is_cpu() || dca->chunk_len % kCudaDualChunkLenMultiple == 0, op,
                   ": Dual Chunk Attention's chunk length ", dca->chunk_len, " must be a multiple of ",
                   kCudaDualChunkLenMultiple, " on CUDA (the estimators' key tiles)");
    q = TensorView(q3.data(), q3.dtype(), Shape{q3.dim(1), q3.dim(2), q3.dim(3)}, dev);
  }
  check_tensor(op, "q", q, dev, 3);
  check_float(op, "q", q);
  check_kv_tensor(op, "k_cache", k_cache, dev, 4);
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hk = k_cache.dim(2);
  NANOVLLM_CHECK(T >= 1 && D >= 1 && k_cache.dim(1) >= 1 && k_cache.dim(3) == D, op, ": q ", q.shape().str(),
                 " and k_cache ", k_cache.shape().str(), " must be [T >= 1, Hq, D] and [NB, BS, Hk, D]");
  NANOVLLM_CHECK(Hk >= 1 && Hq % Hk == 0, op, ": query heads ", Hq, " must be a multiple of KV heads ", Hk);
  NANOVLLM_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  NANOVLLM_CHECK(meta.block_size == k_cache.dim(1), op, ": meta.block_size ", meta.block_size,
                 " != KV cache block size ", k_cache.dim(1));
  NANOVLLM_CHECK(meta.num_seqs == 1, op, ": estimates one sequence's chunk, got meta.num_seqs = ", meta.num_seqs);
  check_seq_metadata(op, meta, T, k_cache.dim(0), k_cache.dim(1), dev);
  const int64_t ctx = meta.max_context_len;
  NANOVLLM_CHECK(ctx >= T && ctx <= INT32_MAX, op, ": meta.max_context_len ", ctx, " must hold the ", T,
                 " query rows (and fit 32 bits)");
  if (dev.is_cpu())
    NANOVLLM_CHECK(meta.context_lens.data_as<const int32_t>()[0] == ctx, op, ": meta.max_context_len ", ctx,
                   " != context_lens[0] ", meta.context_lens.data_as<const int32_t>()[0]);
  const int64_t bs = pattern.block_size;
  NANOVLLM_CHECK(bs >= 1, op, ": pattern.block_size must be >= 1, got ", bs);
  const int64_t NQB = (ctx + bs - 1) / bs;
  check_lists(op, "pattern.block_counts", pattern.block_counts, "pattern.block_index", pattern.block_index, Hk, NQB,
              NQB, dev);
  NANOVLLM_CHECK(!needs_columns || pattern.column_counts.defined(), op, ": needs column lists (pattern.column_counts ",
                 "and pattern.column_index)");
  if (pattern.column_counts.defined() || pattern.column_index.defined())
    check_lists(op, "pattern.column_counts", pattern.column_counts, "pattern.column_index", pattern.column_index, Hk,
                NQB, 1, dev);
  return {.T = T, .ctx = ctx, .Hq = Hq, .Hk = Hk, .D = D, .B = bs, .scale = scale,
          .dca_chunk_len = dca != nullptr ? dca->chunk_len : 0};
}

cpu::PatternOut outputs(const BlockSparsePattern& p) {
  return {p.block_counts, p.block_index, p.column_counts, p.column_index};
}

const int32_t* block_table(const AttentionMetadata& meta) { return meta.block_tables.data_as<const int32_t>(); }

// kBlockBudget (estimator_params.h): room for the sink and the diagonal, and a threshold that ranks blocks.
void check_block_budget(std::string_view op, int64_t max_blocks, double threshold) {
  NANOVLLM_CHECK(max_blocks == 0 || max_blocks >= 2, op, ": max_blocks must be 0 (no limit) or >= 2 (sink and ",
                 "diagonal), got ", max_blocks);
  NANOVLLM_CHECK(max_blocks == 0 || threshold < 1, op, ": max_blocks needs a threshold below 1 (at 1 no block is ",
                 "ranked), got ", threshold);
}

}  // namespace

void xattention_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                         const AttentionMetadata& meta, float scale, const XAttentionParams& params, Stream s) {
  xattention_estimate(pattern, q, k_cache, meta, scale, params, nullptr, s);
}

void xattention_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                         const AttentionMetadata& meta, float scale, const XAttentionParams& params,
                         const DualChunkParams* dca, Stream s) {
  constexpr std::string_view op = "xattention_estimate";
  const cpu::PrefillChunk c = check_estimate(op, pattern, q, k_cache, meta, scale, dca);
  NANOVLLM_CHECK(params.stride >= 1 && c.B % params.stride == 0, op, ": stride ", params.stride,
                 " must divide the pattern block size ", c.B);
  NANOVLLM_CHECK(params.threshold > 0, op, ": threshold must be > 0, got ", params.threshold);
  check_block_budget(op, params.max_blocks, params.threshold);
  if (q.device().is_cuda())
    NANOVLLM_DISPATCH_CUDA(xattention_estimate, q.device(), pattern, q, k_cache, meta, scale, params, dca, s);
  cpu::xattention_estimate(outputs(pattern), q, k_cache, block_table(meta), c, params);
}

void vertical_slash_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                             const AttentionMetadata& meta, float scale, const VerticalSlashParams& params, Stream s) {
  vertical_slash_estimate(pattern, q, k_cache, meta, scale, params, nullptr, s);
}

void vertical_slash_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                             const AttentionMetadata& meta, float scale, const VerticalSlashParams& params,
                             const DualChunkParams* dca, Stream s) {
  constexpr std::string_view op = "vertical_slash_estimate";
  NANOVLLM_CHECK(params.last_q >= 1 && params.vertical >= 0 && params.slash >= 0 && params.sink_tokens >= 0 &&
                     params.recent_diagonals >= 0,
                 op,
                 ": last_q must be >= 1 and vertical, slash, sink_tokens, "
                 "recent_diagonals >= 0 (got ",
                 params.last_q, ", ", params.vertical, ", ", params.slash, ", ", params.sink_tokens, ", ",
                 params.recent_diagonals, ")");
  const cpu::PrefillChunk c = check_estimate(op, pattern, q, k_cache, meta, scale, dca, /*needs_columns=*/true);
  const int64_t columns = vertical_slash_max_columns(c.ctx, c.group(), params.vertical);
  NANOVLLM_CHECK(pattern.column_index.dim(2) >= columns, op, ": pattern.column_index ",
                 pattern.column_index.shape().str(), " holds ", pattern.column_index.dim(2),
                 " columns per list; up to ", columns, " may be chosen (vertical_slash_max_columns)");
  if (q.device().is_cuda())
    NANOVLLM_DISPATCH_CUDA(vertical_slash_estimate, q.device(), pattern, q, k_cache, meta, scale, params, dca, s);
  cpu::vertical_slash_estimate(outputs(pattern), q, k_cache, block_table(meta), c, params);
}

void flexprefill_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                          const AttentionMetadata& meta, float scale, const FlexPrefillParams& params, Stream s) {
  flexprefill_estimate(pattern, q, k_cache, meta, scale, params, nullptr, s);
}

void flexprefill_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                          const AttentionMetadata& meta, float scale, const FlexPrefillParams& params,
                          const DualChunkParams* dca, Stream s) {
  constexpr std::string_view op = "flexprefill_estimate";
  NANOVLLM_CHECK(params.gamma > 0 && params.tau >= 0 && params.min_budget >= 0, op,
                 ": gamma must be > 0, tau and min_budget >= 0 (got ", params.gamma, ", ", params.tau, ", ",
                 params.min_budget, ")");
  const cpu::PrefillChunk c = check_estimate(op, pattern, q, k_cache, meta, scale, dca);
  if (q.device().is_cuda())
    NANOVLLM_DISPATCH_CUDA(flexprefill_estimate, q.device(), pattern, q, k_cache, meta, scale, params, dca, s);
  cpu::flexprefill_estimate(outputs(pattern), q, k_cache, block_table(meta), c, params);
}

void avgpool_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                      const AttentionMetadata& meta, float scale, const AvgPoolParams& params, Stream s) {
  avgpool_estimate(pattern, q, k_cache, meta, scale, params, nullptr, s);
}

void avgpool_estimate(const BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                      const AttentionMetadata& meta, float scale, const AvgPoolParams& params,
                      const DualChunkParams* dca, Stream s) {
  constexpr std::string_view op = "avgpool_estimate";
  NANOVLLM_CHECK(params.threshold > 0, op, ": threshold must be > 0, got ", params.threshold);
  check_block_budget(op, params.max_blocks, params.threshold);
  const cpu::PrefillChunk c = check_estimate(op, pattern, q, k_cache, meta, scale, dca);
  if (q.device().is_cuda())
    NANOVLLM_DISPATCH_CUDA(avgpool_estimate, q.device(), pattern, q, k_cache, meta, scale, params, dca, s);
  cpu::avgpool_estimate(outputs(pattern), q, k_cache, block_table(meta), c, params);
}

}  // namespace nanovllm::ops
