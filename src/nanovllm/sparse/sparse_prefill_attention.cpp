#include "nanovllm/sparse/sparse_prefill_attention.h"

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/host_copy.h"
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

int64_t SparsePrefillAttention::sparse_sequence(int64_t layer, const AttentionMetadata& meta) const {
  const int64_t S = meta.num_seqs;
  if (layer < options_.first_sparse_layer || S < 1 || meta.num_leading_decodes != S - 1) return -1;
  // A prefill chunk of at least two tokens (a single query gains nothing from a block pattern).
  if (S == 1) return meta.num_tokens >= 2 && meta.max_context_len >= options_.min_context ? 0 : -1;
  // After decodes: its length and context are read on the host.
  if (!meta.context_lens.device().is_cpu()) return -1;
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();
  return cu[S] - cu[S - 1] >= 2 && ctx[S - 1] >= options_.min_context ? S - 1 : -1;
}

AttentionMetadata SparsePrefillAttention::last_sequence(const AttentionMetadata& meta) {
  const int64_t S = meta.num_seqs;
  if (S == 1) return meta;
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();
  cu_[0] = 0;
  cu_[1] = cu[S] - cu[S - 1];
  AttentionMetadata m = meta;
  m.num_seqs = 1;
  m.num_tokens = m.max_query_len = cu_[1];
  m.max_context_len = meta.context_lens.data_as<const int32_t>()[S - 1];
  m.cu_seqlens_q = TensorView(cu_, DType::kI32, Shape{2}, meta.cu_seqlens_q.device());
  m.context_lens = meta.context_lens.slice_rows(S - 1, S);
  m.block_tables = meta.block_tables.slice_rows(S - 1, S);
  m.slot_mapping = meta.slot_mapping.slice_rows(cu[S - 1], cu[S]);
  m.num_leading_decodes = 0;
  return m;
}

AttentionMetadata SparsePrefillAttention::leading_decodes(const AttentionMetadata& meta) {
  const int64_t D = meta.num_seqs - 1;
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();
  AttentionMetadata m = meta;
  m.num_seqs = D;
  m.num_tokens = D;
  m.max_query_len = 1;
  m.max_context_len = *std::max_element(ctx, ctx + D);
  m.cu_seqlens_q = meta.cu_seqlens_q.slice_rows(0, D + 1);
  m.context_lens = meta.context_lens.slice_rows(0, D);
  m.block_tables = meta.block_tables.slice_rows(0, D);
  m.slot_mapping = meta.slot_mapping.slice_rows(0, D);
  m.num_leading_decodes = D;
  return m;
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

void SparsePrefillAttention::count(const ops::BlockSparsePattern& pattern, int64_t ctx, int64_t num_tokens,
                                   ops::Stream s) {
  ++counters_.sparse_layer_chunks;
  const int64_t bs = pattern.block_size, NQB = (ctx + bs - 1) / bs;
  const bool on_host = pattern.block_counts.device().is_cpu();
  if (!on_host && !options_.count_on_device) return;
  const int32_t* blocks = pattern.block_counts.data_as<const int32_t>();
  const int32_t* cols = pattern.column_counts.defined() ? pattern.column_counts.data_as<const int32_t>() : nullptr;
  if (!on_host) {  // [Hk, NQB] each: blocks, then columns
    host_counts_.resize(static_cast<size_t>(2 * num_kv_heads_ * NQB));
    ops::copy_to_host(host_counts_.data(), pattern.block_counts, s);
    blocks = host_counts_.data();
    if (cols) {
      ops::copy_to_host(host_counts_.data() + num_kv_heads_ * NQB, pattern.column_counts, s);
      cols = host_counts_.data() + num_kv_heads_ * NQB;
    }
  }
  for (int64_t h = 0; h < num_kv_heads_; ++h)
    for (int64_t i = (ctx - num_tokens) / bs; i < NQB; ++i) {  // the chunk's query blocks
      counters_.attended_blocks += blocks[h * NQB + i];
      counters_.causal_blocks += i + 1;
      ++counters_.rows;
      if (cols) counters_.attended_columns += cols[h * NQB + i];
    }
}

bool SparsePrefillAttention::attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                    const AttentionMetadata& meta, float scale, ops::Stream s) {
  const int64_t seq = sparse_sequence(layer, meta);
  if (seq < 0) {
    ++counters_.dense_layer_chunks;
    return false;
  }
  const int64_t decodes = seq;  // the decode rows before the chunk (a mixed step): dense
  if (decodes > 0)
    ops::paged_attention(out.slice_rows(0, decodes), q.slice_rows(0, decodes), kv.k, kv.v, leading_decodes(meta), scale,
                         s);
  const AttentionMetadata m = last_sequence(meta);
  const TensorView chunk_q = q.slice_rows(decodes, decodes + m.num_tokens);
  const TensorView chunk_out = out.slice_rows(decodes, decodes + m.num_tokens);
  const ops::BlockSparsePattern pattern = pattern_for(m.max_context_len);
  estimate(pattern, chunk_q, kv, m, scale, s);
  ops::block_sparse_prefill_attention(chunk_out, chunk_q, kv.k, kv.v, m, pattern, scale, s);
  count(pattern, m.max_context_len, m.num_tokens, s);
  return true;
}

}  // namespace nanovllm
