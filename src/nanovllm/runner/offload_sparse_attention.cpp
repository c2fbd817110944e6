#include "nanovllm/runner/offload_sparse_attention.h"

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/host_copy.h"

namespace nanovllm {

OffloadSparseAttention::OffloadSparseAttention(const QuestShape& shape, int64_t budget_pages, int64_t sink_pages,
                                               int64_t recent_pages, int64_t cache_tokens, TensorView iota,
                                               const OffloadHostPool& host, Allocator& alloc)
    : quest_(shape, budget_pages, sink_pages, recent_pages, alloc),
      shape_(shape),
      budget_pages_(budget_pages),
      cache_slots_(cache_tokens / shape.block_size),
      iota_(iota),
      host_(host) {
  NANOVLLM_CHECK(shape.max_num_seqs == 1, "offload sparse decode serves one sequence at a time");
  NANOVLLM_CHECK(cache_slots_ == 0 || cache_slots_ >= budget_pages, "offload sparse decode: a GPU cache of ",
                 cache_tokens, " tokens holds ", cache_slots_, " pages, fewer than a selection's ", budget_pages);
  NANOVLLM_CHECK(iota.numel() >= shape.num_blocks, "offload sparse decode: the identity table is too short");
  const int64_t L = shape.num_layers, Hk = shape.num_kv_heads, P = shape.num_blocks, C = cache_slots_;
  cache_ = Buffer(alloc, shape.kv_dtype, Shape{L * 2, C, shape.block_size, Hk, shape.head_dim});
  const int64_t state_ints = Hk * (P + 2 * C + 1);  // one layer's page_slot, slot_page, slot_stamp, hand
  state_ = Buffer(alloc, DType::kI32, Shape{L, state_ints});
  plan_ = Buffer(alloc, DType::kI32, Shape{1, Hk, budget_pages, 2});
  counters_ = Buffer(alloc, DType::kI64, Shape{2});
  const Device dev = alloc.device();
  for (int64_t l = 0; l < L; ++l) {
    int32_t* base = state_.view().data_as<int32_t>() + l * state_ints;
    const auto view = [&](int64_t offset, Shape shape_of) {
      return TensorView(base + offset, DType::kI32, shape_of, dev);
    };
    states_.push_back({.page_slot = view(0, {Hk, P}),
                       .slot_page = view(Hk * P, {Hk, C}),
                       .slot_stamp = view(Hk * (P + C), {Hk, C}),
                       .hand = view(Hk * (P + 2 * C), {Hk})});
  }
}

size_t OffloadSparseAttention::device_bytes() const {
  // The Quest metadata and workspace are the policy's: 2 x [L, P, Hk, D] + small.
  const size_t metadata = static_cast<size_t>(2 * shape_.num_layers * shape_.num_blocks * shape_.num_kv_heads *
                                              shape_.head_dim) * dtype_size(shape_.kv_dtype);
  return metadata + cache_.nbytes() + state_.nbytes() + plan_.nbytes() + counters_.nbytes();
}

void OffloadSparseAttention::begin_sequence(ops::Stream s) {
  for (size_t l = 0; l < states_.size(); ++l)
    ops::page_cache_reset(states_[l], l == 0 ? counters_.view() : TensorView(), s);
  step_ = 0;
  host_tokens_ = 0;
}

void OffloadSparseAttention::begin_step(int64_t host_tokens) {
  host_tokens_ = host_tokens;
  ++step_;
}

LayerKvCache OffloadSparseAttention::paged(const LayerKvCache& kv) const {
  const Shape shape{shape_.num_blocks, shape_.block_size, shape_.num_kv_heads, shape_.head_dim};
  NANOVLLM_ASSERT(kv.k.numel() == shape.numel());
  return {kv.k.reshape(shape), kv.v.reshape(shape)};
}

bool OffloadSparseAttention::attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                    const AttentionMetadata& meta, float scale, ops::Stream s) {
  const LayerKvCache pages = paged(kv);
  // The layer buffer's positions are its slots, whatever block size the caller's view has.
  quest_.update_pages(layer, pages.k, meta.slot_mapping, s);
  if (meta.num_seqs != 1 || meta.max_query_len != 1) {  // a prefill chunk: dense
    quest_.count_dense_step();
    return false;
  }
  const int64_t BS = shape_.block_size, n_pages = (meta.max_context_len + BS - 1) / BS;
  AttentionMetadata by_page = meta;  // the same step over the buffer's identity table in pages
  by_page.block_tables = iota_.slice_rows(0, n_pages).reshape({1, n_pages});
  by_page.block_size = BS;
  by_page.num_leading_decodes = 1;
  const TensorView selected = quest_.select(layer, q, by_page, s);
  const int64_t Hk = shape_.num_kv_heads, D = shape_.head_dim, N = shape_.num_blocks * BS;
  const Shape rows{N, Hk, D};
  const TensorView cache = cache_.view().reshape({shape_.num_layers * 2, cache_slots_, BS, Hk, D});
  const DType dt = shape_.kv_dtype;
  const Shape host_rows{host_.capacity(), Hk, D};
  ops::page_cache_plan(plan_.view(), selected, states_[static_cast<size_t>(layer)], host_tokens_, BS, step_,
                       counters_.view(), s);
  ops::page_cache_fetch(kv.k.reshape(rows), kv.v.reshape(rows), TensorView(host_.k(layer), dt, host_rows),
                        TensorView(host_.v(layer), dt, host_rows), cache.slice_rows(2 * layer, 2 * layer + 1).reshape(
                            {cache_slots_, BS, Hk, D}),
                        cache.slice_rows(2 * layer + 1, 2 * layer + 2).reshape({cache_slots_, BS, Hk, D}), selected,
                        plan_.view(), host_tokens_, s);
  quest_.attend_selected(out, q, pages, by_page, selected, scale, s);
  return true;
}

PageCacheCounters OffloadSparseAttention::cache_counters(ops::Stream s) const {
  int64_t c[2] = {0, 0};
  ops::copy_to_host(c, counters_.view(), s);
  return {c[0], c[1]};
}

}  // namespace nanovllm
