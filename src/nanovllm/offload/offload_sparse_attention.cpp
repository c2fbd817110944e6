#include "nanovllm/offload/offload_sparse_attention.h"

#include <algorithm>
#include <span>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/host_copy.h"

namespace nanovllm {

OffloadSparseAttention::OffloadSparseAttention(std::unique_ptr<SparseDecodePolicy> policy, int64_t cache_tokens,
                                               std::vector<const OffloadHostPool*> hosts, DType kv_dtype,
                                               Allocator& alloc, ops::Stream s)
    : policy_(std::move(policy)),
      shape_(policy_->shape()),
      budget_pages_(policy_->budget_pages()),
      cache_slots_(cache_tokens / shape_.block_size),
      hosts_(std::move(hosts)),
      kv_dtype_(kv_dtype) {
  const PagedKvShape& shape = shape_;
  const int64_t budget_pages = budget_pages_;
  const int64_t lanes = static_cast<int64_t>(hosts_.size());
  NANOVLLM_CHECK(lanes >= 1 && shape.max_num_seqs == lanes && shape.num_blocks % lanes == 0 &&
                     shape.max_blocks_per_seq == shape.num_blocks / lanes,
                 "offload sparse decode: ", lanes, " lanes do not split the layer buffer's ", shape.num_blocks,
                 " pages");
  NANOVLLM_CHECK(cache_slots_ == 0 || cache_slots_ >= budget_pages, "offload sparse decode: a GPU cache of ",
                 cache_tokens, " tokens holds ", cache_slots_, " pages, fewer than a selection's ", budget_pages);
  pages_per_lane_ = shape.num_blocks / lanes;
  const int64_t L = shape.num_layers, Hk = shape.num_kv_heads, P = pages_per_lane_, C = cache_slots_;
  cache_ = Buffer(alloc, kv_dtype_, Shape{L * 2 * lanes, C, shape.block_size, Hk, shape.head_dim});
  if (kv_dtype_ == DType::kF8E4M3)
    cache_scale_ = Buffer(alloc, DType::kF32, Shape{L * 2 * lanes, C, shape.block_size, Hk});
  const int64_t layer_ints = lanes * Hk * (P + 2 * C + 1);  // one layer's page_slot, slot_page, slot_stamp, hand
  state_ = Buffer(alloc, DType::kI32, Shape{L, layer_ints});
  plan_ = Buffer(alloc, DType::kI32, Shape{lanes, Hk, budget_pages, 2});
  counters_ = Buffer(alloc, DType::kI64, Shape{2});
  const Device dev = alloc.device();
  for (int64_t l = 0; l < L; ++l) {
    int32_t* base = state_.view().data_as<int32_t>() + l * layer_ints;
    const auto view = [&](int64_t offset, Shape shape_of) {
      return TensorView(base + offset, DType::kI32, shape_of, dev);
    };
    layer_states_.push_back({.page_slot = view(0, {lanes, Hk, P}),
                             .slot_page = view(lanes * Hk * P, {lanes, Hk, C}),
                             .slot_stamp = view(lanes * Hk * (P + C), {lanes, Hk, C}),
                             .hand = view(lanes * Hk * (P + 2 * C), {lanes, Hk})});
  }
  ops::page_cache_reset(lane_state(0, 0), counters_.view(), s);  // the counters once; each lane's state at its prefill
}

ops::PageCacheState OffloadSparseAttention::lane_state(int64_t lane, int64_t layer) const {
  const ops::PageCacheState& st = layer_states_[static_cast<size_t>(layer)];
  const auto one = [&](const TensorView& t) {
    const TensorView rows = t.slice_rows(lane, lane + 1);
    return t.ndim() == 3 ? rows.reshape({t.dim(1), t.dim(2)}) : rows.reshape({t.dim(1)});
  };
  return {one(st.page_slot), one(st.slot_page), one(st.slot_stamp), one(st.hand)};
}

KvCacheTensor OffloadSparseAttention::layer_cache(int64_t layer, bool value) const {
  const int64_t lanes = static_cast<int64_t>(hosts_.size()), BS = shape_.block_size, Hk = shape_.num_kv_heads;
  const int64_t i = layer * 2 + (value ? 1 : 0), C = cache_slots_;
  const int64_t n = lanes * C * BS * Hk;  // rows of one (layer, K or V)
  char* base = static_cast<char*>(cache_.data()) + static_cast<size_t>(i * n * shape_.head_dim) * dtype_size(kv_dtype_);
  const TensorView elements(base, kv_dtype_, Shape{lanes, C, BS, Hk, shape_.head_dim}, cache_.device());
  if (kv_dtype_ != DType::kF8E4M3) return elements;
  return {elements, TensorView(static_cast<float*>(cache_scale_.data()) + i * n, DType::kF32, Shape{lanes, C, BS, Hk},
                               cache_.device())};
}

size_t OffloadSparseAttention::device_bytes() const {
  return cache_.nbytes() + cache_scale_.nbytes() + state_.nbytes() + plan_.nbytes() + counters_.nbytes();
}

void OffloadSparseAttention::begin_prefill(int64_t lane, ops::Stream s) {
  NANOVLLM_ASSERT(lane >= 0 && lane < static_cast<int64_t>(hosts_.size()));
  for (int64_t l = 0; l < shape_.num_layers; ++l) ops::page_cache_reset(lane_state(lane, l), TensorView(), s);
  rows_.clear();
}

void OffloadSparseAttention::begin_decode(std::vector<OffloadDecodeRow> rows, TensorView page_tables) {
  NANOVLLM_ASSERT(!rows.empty() && page_tables.dim(0) == static_cast<int64_t>(rows.size()));
  rows_ = std::move(rows);
  page_tables_ = page_tables;
  ++step_;
}

bool OffloadSparseAttention::attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                    const AttentionMetadata& meta, float scale, ops::Stream s) {
  return attend_step(layer, out, q, kv, meta, scale, s, nullptr);
}

bool OffloadSparseAttention::attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                               const AttentionMetadata& meta, const ops::DualChunkParams& dca,
                                               float scale, ops::Stream s) {
  return attend_step(layer, out, q, kv, meta, scale, s, &dca);
}

bool OffloadSparseAttention::attend_step(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                         const AttentionMetadata& meta, float scale, ops::Stream s,
                                         const ops::DualChunkParams* dca) {
  const int64_t BS = shape_.block_size, Hk = shape_.num_kv_heads, D = shape_.head_dim;
  const Shape page_shape{shape_.num_blocks, BS, Hk, D};
  NANOVLLM_ASSERT(kv.k.numel() == page_shape.numel());
  // The layer buffer's positions are its slots, whatever block size the caller's view has.
  const LayerKvCache pages{kv.k.reshape(page_shape), kv.v.reshape(page_shape)};
  policy_->update_pages(layer, pages.k, meta.slot_mapping, s);
  if (rows_.empty()) {  // a prefill chunk: dense
    policy_->count_dense_step();
    return false;
  }
  const int64_t B = static_cast<int64_t>(rows_.size());
  NANOVLLM_ASSERT(meta.num_seqs == B && meta.max_query_len == 1);
  AttentionMetadata by_page = meta;  // the same step over the lanes' page tables
  by_page.block_tables = page_tables_;
  by_page.block_size = BS;
  by_page.num_leading_decodes = B;
  const TensorView selected = policy_->select(layer, q, by_page, s, dca);  // [B, Hk, K]: pages of each sequence

  // One plan and one fetch for all rows: each row's lane of the stacked states, caches and layer buffer.
  const int64_t lanes = static_cast<int64_t>(hosts_.size());
  const Shape lane_shape{lanes, pages_per_lane_ * BS, Hk, D};
  // The row's lane's host pool as [capacity, Hk, D] K or V rows; fp8: with the head-major copy of their scales.
  const auto host_view = [&](const OffloadHostPool& host, bool value) -> KvCacheTensor {
    const TensorView elements(value ? host.v(layer) : host.k(layer), kv_dtype_, Shape{host.capacity(), Hk, D});
    if (kv_dtype_ != DType::kF8E4M3) return elements;
    return {elements, TensorView(value ? host.v_scale_by_head(layer) : host.k_scale_by_head(layer), DType::kF32,
                                 Shape{Hk, host.capacity()})};
  };
  host_k_.clear();
  host_v_.clear();
  for (const OffloadDecodeRow& row : rows_) {
    const OffloadHostPool& host = *hosts_[static_cast<size_t>(row.lane)];
    host_k_.push_back(host_view(host, false));
    host_v_.push_back(host_view(host, true));
  }
  const std::span<const OffloadDecodeRow> rows(rows_);
  const std::span<const KvCacheTensor> host_k(host_k_), host_v(host_v_);
  for (int64_t b0 = 0; b0 < B; b0 += ops::kPageCacheMaxRows) {  // one launch each unless B > kPageCacheMaxRows
    const int64_t b1 = std::min(B, b0 + ops::kPageCacheMaxRows), n = b1 - b0;
    const TensorView plan = plan_.view().slice_rows(b0, b1), sel = selected.slice_rows(b0, b1);
    const auto part = [&](auto span) { return span.subspan(static_cast<size_t>(b0), static_cast<size_t>(n)); };
    ops::page_cache_plan_rows(plan, sel, layer_states_[static_cast<size_t>(layer)], part(rows), BS, step_,
                              counters_.view(), s);
    ops::page_cache_fetch_rows(kv.k.reshape(lane_shape), kv.v.reshape(lane_shape), part(host_k), part(host_v),
                               layer_cache(layer, false), layer_cache(layer, true), sel, plan, part(rows), s);
  }
  policy_->attend_selected(out, q, pages, by_page, selected, scale, s, dca);
  return true;
}

PageCacheCounters OffloadSparseAttention::cache_counters(ops::Stream s) const {
  int64_t c[2] = {0, 0};
  ops::copy_to_host(c, counters_.view(), s);
  return {c[0], c[1]};
}

}  // namespace nanovllm
