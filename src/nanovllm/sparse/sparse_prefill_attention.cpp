#include "nanovllm/sparse/sparse_prefill_attention.h"

#include <algorithm>
#include <cmath>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/pattern_estimators.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {

SparsePrefillAttention::SparsePrefillAttention(const SparsePrefillOptions& options, int64_t num_query_heads,
                                               int64_t num_kv_heads, Allocator& alloc)
    : options_(options), num_query_heads_(num_query_heads), num_kv_heads_(num_kv_heads), alloc_(alloc) {
  NANOVLLM_CHECK(options.block_size >= 1 && options.first_sparse_layer >= 0 && options.min_context >= 1,
                 "sparse prefill: block_size ", options.block_size, ", first sparse layer ", options.first_sparse_layer,
                 " and min_context ", options.min_context, " must be >= 1, 0, 1");
  NANOVLLM_CHECK(num_kv_heads >= 1 && num_query_heads % num_kv_heads == 0, "sparse prefill: ", num_query_heads,
                 " query heads are not a multiple of ", num_kv_heads, " KV heads");
}

bool SparsePrefillAttention::applies(int64_t layer, const AttentionMetadata& meta) const {
  // One sequence's prefill chunk (a decode step's single query gains nothing from a block pattern).
  return layer >= options_.first_sparse_layer && meta.num_seqs == 1 && meta.num_leading_decodes == 0 &&
         meta.num_tokens >= 2 && meta.max_context_len >= options_.min_context;
}

ops::VerticalSlashParams SparsePrefillAttention::vertical_slash_for(int64_t ctx) const {
  ops::VerticalSlashParams p = options_.vertical_slash;
  const double budget = options_.budget_share * static_cast<double>(ctx);
  if (p.vertical == 0) p.vertical = std::max(p.sink_tokens + 1, static_cast<int64_t>(0.2 * budget));
  if (p.slash == 0) p.slash = std::max(p.recent_diagonals + 1, static_cast<int64_t>(0.8 * budget));
  return p;
}

ops::BlockSparsePattern SparsePrefillAttention::pattern_for(int64_t ctx) {
  const int64_t bs = options_.block_size, Hk = num_kv_heads_, NQB = (ctx + bs - 1) / bs;
  const bool columns = options_.estimator == SparsePrefillOptions::Estimator::kVerticalSlash;
  const int64_t MAXC = columns ? std::max<int64_t>(1, ops::vertical_slash_max_columns(ctx, num_query_heads_ / Hk,
                                                                                      vertical_slash_for(ctx).vertical))
                               : 0;
  const int64_t ints = Hk * NQB * (1 + NQB) + (columns ? Hk * NQB * (1 + MAXC) : 0);
  if (ints > pattern_ints_) {  // grows to the longest context seen; steps of shorter ones reuse it
    pattern_ = Buffer(alloc_, DType::kI32, Shape{ints});
    pattern_ints_ = ints;
  }
  int32_t* base = pattern_.view().data_as<int32_t>();
  const Device dev = alloc_.device();
  ops::BlockSparsePattern p;
  p.block_size = bs;
  p.block_counts = TensorView(base, DType::kI32, Shape{Hk, NQB}, dev);
  p.block_index = TensorView(base + Hk * NQB, DType::kI32, Shape{Hk, NQB, NQB}, dev);
  if (columns) {
    int32_t* c = base + Hk * NQB * (1 + NQB);
    p.column_counts = TensorView(c, DType::kI32, Shape{Hk, NQB}, dev);
    p.column_index = TensorView(c + Hk * NQB, DType::kI32, Shape{Hk, NQB, MAXC}, dev);
  }
  return p;
}

void SparsePrefillAttention::estimate(const ops::BlockSparsePattern& pattern, TensorView q, const LayerKvCache& kv,
                                      const AttentionMetadata& meta, float scale, ops::Stream s) {
  using E = SparsePrefillOptions::Estimator;
  switch (options_.estimator) {
    case E::kXAttention:
      ops::xattention_estimate(pattern, q, kv.k, meta, scale, options_.xattention, s);
      return;
    case E::kVerticalSlash:
      ops::vertical_slash_estimate(pattern, q, kv.k, meta, scale, vertical_slash_for(meta.max_context_len), s);
      return;
    case E::kFlexPrefill:
      ops::flexprefill_estimate(pattern, q, kv.k, meta, scale, options_.flexprefill, s);
      return;
    case E::kAvgPool:
      ops::avgpool_estimate(pattern, q, kv.k, meta, scale, options_.avgpool, s);
      return;
  }
}

void SparsePrefillAttention::count(const ops::BlockSparsePattern& pattern, int64_t ctx, int64_t num_tokens) {
  ++counters_.sparse_layer_chunks;
  if (!pattern.block_counts.device().is_cpu()) return;  // the counters read the pattern on the host
  const int64_t bs = pattern.block_size, NQB = (ctx + bs - 1) / bs;
  const int32_t* blocks = pattern.block_counts.data_as<const int32_t>();
  const int32_t* cols = pattern.column_counts.defined() ? pattern.column_counts.data_as<const int32_t>() : nullptr;
  for (int64_t h = 0; h < num_kv_heads_; ++h)
    for (int64_t i = (ctx - num_tokens) / bs; i < NQB; ++i) {  // the chunk's query blocks
      counters_.attended_blocks += blocks[h * NQB + i];
      counters_.causal_blocks += i + 1;
      if (cols) counters_.attended_columns += cols[h * NQB + i];
    }
}

bool SparsePrefillAttention::attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                    const AttentionMetadata& meta, float scale, ops::Stream s) {
  if (!applies(layer, meta)) {
    ++counters_.dense_layer_chunks;
    return false;
  }
  const int64_t ctx = meta.max_context_len;
  const ops::BlockSparsePattern pattern = pattern_for(ctx);
  estimate(pattern, q, kv, meta, scale, s);
  ops::block_sparse_prefill_attention(out, q, kv.k, kv.v, meta, pattern, scale, s);
  count(pattern, ctx, meta.num_tokens);
  return true;
}

}  // namespace nanovllm
