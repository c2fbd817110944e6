#include "nanovllm/offload/offload_sparse_attention.h"

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
  cache_ = Buffer(alloc, kv_dtype_, Shape{lanes * L * 2, C, shape.block_size, Hk, shape.head_dim});
  if (kv_dtype_ == DType::kF8E4M3)
    cache_scale_ = Buffer(alloc, DType::kF32, Shape{lanes * L * 2, C, shape.block_size, Hk});
  const int64_t state_ints = Hk * (P + 2 * C + 1);  // one (lane, layer)'s page_slot, slot_page, slot_stamp, hand
  state_ = Buffer(alloc, DType::kI32, Shape{lanes * L, state_ints});
  plan_ = Buffer(alloc, DType::kI32, Shape{lanes, Hk, budget_pages, 2});
  counters_ = Buffer(alloc, DType::kI64, Shape{2});
  const Device dev = alloc.device();
  for (int64_t i = 0; i < lanes * L; ++i) {
    int32_t* base = state_.view().data_as<int32_t>() + i * state_ints;
    const auto view = [&](int64_t offset, Shape shape_of) {
      return TensorView(base + offset, DType::kI32, shape_of, dev);
    };
    states_.push_back({.page_slot = view(0, {Hk, P}),
                       .slot_page = view(Hk * P, {Hk, C}),
                       .slot_stamp = view(Hk * (P + C), {Hk, C}),
                       .hand = view(Hk * (P + 2 * C), {Hk})});
  }
  ops::page_cache_reset(states_[0], counters_.view(), s);  // the counters once; each lane's state at its prefill
}

size_t OffloadSparseAttention::device_bytes() const {
  return cache_.nbytes() + cache_scale_.nbytes() + state_.nbytes() + plan_.nbytes() + counters_.nbytes();
}

void OffloadSparseAttention::begin_prefill(int64_t lane, ops::Stream s) {
  NANOVLLM_ASSERT(lane >= 0 && lane < static_cast<int64_t>(hosts_.size()));
  for (int64_t l = 0; l < shape_.num_layers; ++l) ops::page_cache_reset(state(lane, l), TensorView(), s);
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

  const int64_t lane_rows = pages_per_lane_ * BS, C = cache_slots_;
  const KvCacheTensor dst_k = kv.k.reshape({shape_.num_blocks * BS, Hk, D});
  const KvCacheTensor dst_v = kv.v.reshape({shape_.num_blocks * BS, Hk, D});
  // Cache (lane, layer, K or V) i: [C, BS, Hk, D] and its scales.
  const auto cache = [&](int64_t i) -> KvCacheTensor {
    const int64_t n = C * BS * Hk;
    char* base = static_cast<char*>(cache_.data()) + static_cast<size_t>(i * n * D) * dtype_size(kv_dtype_);
    const TensorView elements(base, kv_dtype_, Shape{C, BS, Hk, D}, cache_.device());
    if (kv_dtype_ != DType::kF8E4M3) return elements;
    return {elements, TensorView(static_cast<float*>(cache_scale_.data()) + i * n, DType::kF32, Shape{C, BS, Hk},
                                 cache_.device())};
  };
  // The lane's host pool as [capacity, Hk, D] K or V rows.
  const auto host_view = [&](const OffloadHostPool& host, bool value) -> KvCacheTensor {
    const TensorView elements(value ? host.v(layer) : host.k(layer), kv_dtype_, Shape{host.capacity(), Hk, D});
    if (kv_dtype_ != DType::kF8E4M3) return elements;
    return {elements, TensorView(value ? host.v_scale(layer) : host.k_scale(layer), DType::kF32,
                                 Shape{host.capacity(), Hk})};
  };
  for (int64_t b = 0; b < B; ++b) {  // each row from its own lane's cache and host pool
    const OffloadDecodeRow& row = rows_[static_cast<size_t>(b)];
    const OffloadHostPool& host = *hosts_[static_cast<size_t>(row.lane)];
    const int64_t c = 2 * (row.lane * shape_.num_layers + layer);  // this lane and layer's K cache; V follows
    const TensorView plan = plan_.view().slice_rows(b, b + 1);
    const TensorView sel = selected.slice_rows(b, b + 1);
    ops::page_cache_plan(plan, sel, state(row.lane, layer), row.host_tokens, BS, step_, counters_.view(), s);
    ops::page_cache_fetch(dst_k.slice_rows(row.lane * lane_rows, (row.lane + 1) * lane_rows),
                          dst_v.slice_rows(row.lane * lane_rows, (row.lane + 1) * lane_rows),
                          host_view(host, false), host_view(host, true), cache(c), cache(c + 1), sel, plan,
                          row.host_tokens, s);
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
