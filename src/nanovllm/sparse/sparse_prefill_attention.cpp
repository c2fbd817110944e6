#include "nanovllm/sparse/sparse_prefill_attention.h"

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/host_copy.h"
#include "nanovllm/kernels/ops.h"
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

namespace {

// A step of several sequences can be split per sequence when the runner gave the host views and the per-sequence
// cu_seqlens (AttentionMetadata; ForwardBatch::views does on both backends).
bool splittable(const AttentionMetadata& meta) {
  return meta.host_cu_seqlens_q != nullptr && meta.host_context_lens != nullptr && meta.seq_cu_seqlens_q.defined();
}

// Sequences [0, n) of the step: a prefix keeps cu_seqlens_q starting at 0, so its views are slices.
AttentionMetadata prefix(const AttentionMetadata& meta, int64_t n) {
  const int32_t* cu = meta.host_cu_seqlens_q;
  const int32_t* ctx = meta.host_context_lens;
  AttentionMetadata m = meta;
  m.num_seqs = n;
  m.num_tokens = cu[n];
  m.max_query_len = m.max_context_len = 0;
  for (int64_t i = 0; i < n; ++i) {
    m.max_query_len = std::max<int64_t>(m.max_query_len, cu[i + 1] - cu[i]);
    m.max_context_len = std::max<int64_t>(m.max_context_len, ctx[i]);
  }
  m.cu_seqlens_q = meta.cu_seqlens_q.slice_rows(0, n + 1);
  m.context_lens = meta.context_lens.slice_rows(0, n);
  m.block_tables = meta.block_tables.slice_rows(0, n);
  m.slot_mapping = meta.slot_mapping.slice_rows(0, cu[n]);
  m.seq_cu_seqlens_q = meta.seq_cu_seqlens_q.slice_rows(0, n);
  m.num_leading_decodes = std::min(meta.num_leading_decodes, n);
  return m;
}

// Sequence i of the step on its own.
AttentionMetadata sequence(const AttentionMetadata& meta, int64_t i) {
  const int32_t* cu = meta.host_cu_seqlens_q;
  AttentionMetadata m = meta;
  m.num_seqs = 1;
  m.num_tokens = m.max_query_len = cu[i + 1] - cu[i];
  m.max_context_len = meta.host_context_lens[i];
  m.cu_seqlens_q = meta.seq_cu_seqlens_q.slice_rows(i, i + 1).reshape({2});  // {0, its query length}
  m.context_lens = meta.context_lens.slice_rows(i, i + 1);
  m.block_tables = meta.block_tables.slice_rows(i, i + 1);
  m.slot_mapping = meta.slot_mapping.slice_rows(cu[i], cu[i + 1]);
  m.num_leading_decodes = i < meta.num_leading_decodes ? 1 : 0;
  m.host_cu_seqlens_q = nullptr;  // one sequence: nothing left to split
  m.host_context_lens = nullptr;
  m.seq_cu_seqlens_q = TensorView();
  return m;
}

}  // namespace

std::vector<int64_t> SparsePrefillAttention::sparse_sequences(int64_t layer, const AttentionMetadata& meta) const {
  std::vector<int64_t> seqs;
  const int64_t S = meta.num_seqs;
  if (layer < options_.first_sparse_layer || S < 1) return seqs;
  // A prefill chunk of at least two tokens (a single query gains nothing from a block pattern).
  const auto qualifies = [&](int64_t len, int64_t ctx) { return len >= 2 && ctx >= options_.min_context; };
  if (S == 1) {
    if (qualifies(meta.num_tokens, meta.max_context_len)) seqs.push_back(0);
    return seqs;
  }
  if (!splittable(meta)) return seqs;
  const int32_t* cu = meta.host_cu_seqlens_q;
  const int32_t* ctx = meta.host_context_lens;
  for (int64_t i = meta.num_leading_decodes; i < S; ++i)
    if (qualifies(cu[i + 1] - cu[i], ctx[i])) seqs.push_back(i);
  return seqs;
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
                                      const AttentionMetadata& meta, float scale, ops::Stream s,
                                      const ops::DualChunkParams* dca) {
  using E = SparsePrefillOptions::Estimator;
  switch (options_.estimator) {
    case E::kXAttention:
      ops::xattention_estimate(pattern, q, kv.k, meta, scale, options_.xattention, dca, s);
      return;
    case E::kVerticalSlash:
      ops::vertical_slash_estimate(pattern, q, kv.k, meta, scale, vertical_slash_for(meta.max_context_len), dca,
                                  s);
      return;
    case E::kFlexPrefill:
      ops::flexprefill_estimate(pattern, q, kv.k, meta, scale, options_.flexprefill, dca, s);
      return;
    case E::kAvgPool:
      ops::avgpool_estimate(pattern, q, kv.k, meta, scale, options_.avgpool, dca, s);
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

void SparsePrefillAttention::attend_chunk(TensorView out, TensorView q, const LayerKvCache& kv,
                                          const AttentionMetadata& meta, float scale, ops::Stream s,
                                          const ops::DualChunkParams* dca) {
  const ops::BlockSparsePattern pattern = pattern_for(meta.max_context_len);
  estimate(pattern, q, kv, meta, scale, s, dca);
  ops::block_sparse_prefill_attention(out, q, kv.k, kv.v, meta, pattern, scale, dca, s);
  count(pattern, meta.max_context_len, meta.num_tokens, s);
}

TensorView SparsePrefillAttention::query_rows(TensorView q, int64_t begin, int64_t end,
                                             const ops::DualChunkParams* dca, ops::Stream s) {
  if (dca == nullptr) return q.slice_rows(begin, end);
  const int64_t T = q.dim(1), Hq = q.dim(2), D = q.dim(3), n = end - begin;
  if (3 * n * Hq * D > rows_elements_) {
    rows_ = Buffer(alloc_, q.dtype(), Shape{3 * n * Hq * D});
    rows_elements_ = 3 * n * Hq * D;
  }
  const TensorView rows(rows_.data(), q.dtype(), Shape{3, n, Hq, D}, alloc_.device());  // [3, n, Hq, D]
  const TensorView all = q.reshape({3 * T, Hq, D});
  const TensorView dst = rows.reshape({3 * n, Hq, D});
  for (int64_t r = 0; r < 3; ++r)
    ops::convert(dst.slice_rows(r * n, (r + 1) * n), all.slice_rows(r * T + begin, r * T + end), s);
  return rows;
}

bool SparsePrefillAttention::attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                    const AttentionMetadata& meta, float scale, ops::Stream s) {
  return attend_step(layer, out, q, kv, meta, scale, s, nullptr);
}

bool SparsePrefillAttention::attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                               const AttentionMetadata& meta, const ops::DualChunkParams& dca,
                                               float scale, ops::Stream s) {
  return attend_step(layer, out, q, kv, meta, scale, s, &dca);
}

bool SparsePrefillAttention::attend_step(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                         const AttentionMetadata& meta, float scale, ops::Stream s,
                                         const ops::DualChunkParams* dca) {
  const std::vector<int64_t> sparse = sparse_sequences(layer, meta);
  if (sparse.empty()) {
    ++counters_.dense_layer_chunks;
    return false;
  }
  if (meta.num_seqs == 1) {
    attend_chunk(out, q, kv, meta, scale, s, dca);
    return true;
  }
  const auto dense = [&](TensorView o, TensorView rows, const AttentionMetadata& m) {
    if (dca != nullptr) {
      ops::dual_chunk_attention(o, rows, kv.k, kv.v, m, *dca, scale, s);
    } else {
      ops::paged_attention(o, rows, kv.k, kv.v, m, scale, s);
    }
  };
  // Several sequences: those before the first sparse chunk (the decodes a mixed step leads with, short chunks) in one
  // dense call, then each later one on its own, sparsely or densely.
  const int32_t* cu = meta.host_cu_seqlens_q;
  const int64_t first = sparse.front();
  if (first > 0) dense(out.slice_rows(0, cu[first]), query_rows(q, 0, cu[first], dca, s), prefix(meta, first));
  size_t next = 0;
  for (int64_t i = first; i < meta.num_seqs; ++i) {
    if (cu[i + 1] == cu[i]) continue;
    const AttentionMetadata m = sequence(meta, i);
    const TensorView seq_out = out.slice_rows(cu[i], cu[i + 1]), seq_q = query_rows(q, cu[i], cu[i + 1], dca, s);
    if (next < sparse.size() && sparse[next] == i) {
      ++next;
      attend_chunk(seq_out, seq_q, kv, m, scale, s, dca);
    } else {
      dense(seq_out, seq_q, m);
    }
  }
  return true;
}

}  // namespace nanovllm
