#include "nanovllm/sparse/decode_policy.h"

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {

SparseDecodePolicy::SparseDecodePolicy(const PagedKvShape& shape, int64_t budget_pages, int64_t sink_pages,
                                       int64_t recent_pages, Allocator& alloc)
    : shape_(shape), budget_pages_(budget_pages), sink_pages_(sink_pages), recent_pages_(recent_pages) {
  NANOVLLM_CHECK(sink_pages >= 0 && recent_pages >= 1 && budget_pages > sink_pages + recent_pages,
                 "sparse decode: a budget of ", budget_pages, " pages leaves no page to select beside ", sink_pages,
                 " sink and ", recent_pages, " recent pages");
  const int64_t Hk = shape.num_kv_heads;
  scores_ = Buffer(alloc, DType::kF32, Shape{shape.max_num_seqs, Hk, shape.max_blocks_per_seq});
  selected_ = Buffer(alloc, DType::kI32, Shape{shape.max_num_seqs, Hk, budget_pages});
  attention_scratch_ = Buffer(
      alloc, DType::kI32,
      Shape{ops::sparse_decode_scratch_ints(shape.max_num_seqs, Hk, budget_pages, shape.block_size)});
}

int64_t SparseDecodePolicy::workspace_bytes(const PagedKvShape& shape, int64_t budget_pages) {
  const int64_t S = shape.max_num_seqs, Hk = shape.num_kv_heads;
  return 4 * (S * Hk * (shape.max_blocks_per_seq + budget_pages) +
              ops::sparse_decode_scratch_ints(S, Hk, budget_pages, shape.block_size));
}

bool SparseDecodePolicy::attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                const AttentionMetadata& meta, float scale, ops::Stream s) {
  return attend_step(layer, out, q, kv, meta, scale, s, nullptr);
}

bool SparseDecodePolicy::attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                           const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale,
                                           ops::Stream s) {
  return attend_step(layer, out, q, kv, meta, scale, s, &dca);
}

void SparseDecodePolicy::score_pages_dual_chunk(TensorView, int64_t, TensorView, const AttentionMetadata&,
                                                const ops::DualChunkParams&, ops::Stream) {
  NANOVLLM_CHECK(false, "this sparse decode policy does not score pages with Dual Chunk Attention (the model's "
                 "dual_chunk_attention_config)");
}

bool SparseDecodePolicy::attend_step(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                                     const AttentionMetadata& meta, float scale, ops::Stream s,
                                     const ops::DualChunkParams* dca) {
  update_pages(layer, kv.k, meta.slot_mapping, s);
  // Only whole decode steps go sparse: a prefill query needs its causal prefix, which the dense kernel does.
  if (meta.num_seqs == 0 || meta.num_leading_decodes != meta.num_seqs) {
    count_dense_step();
    return false;
  }
  attend_selected(out, q, kv, meta, select(layer, q, meta, s, dca), scale, s, dca);
  return true;
}

TensorView SparseDecodePolicy::select(int64_t layer, TensorView q, const AttentionMetadata& meta, ops::Stream s,
                                      const ops::DualChunkParams* dca) {
  const int64_t S = meta.num_seqs, Hk = shape_.num_kv_heads, MB = meta.block_tables.dim(1);
  NANOVLLM_CHECK(S <= shape_.max_num_seqs && MB <= shape_.max_blocks_per_seq, "sparse decode: step of ", S,
                 " sequences with ", MB, " block-table columns exceeds the policy's workspace");
  const TensorView scores = scores_.view().reshape({shape_.max_num_seqs * Hk * shape_.max_blocks_per_seq})
                                .slice_rows(0, S * Hk * MB).reshape({S, Hk, MB});
  const TensorView selected = selected_.view().reshape({shape_.max_num_seqs * Hk * budget_pages_})
                                  .slice_rows(0, S * Hk * budget_pages_).reshape({S, Hk, budget_pages_});
  if (dca != nullptr) {
    score_pages_dual_chunk(scores, layer, q, meta, *dca, s);
  } else {
    score_pages(scores, layer, q, meta, s);
  }
  ops::select_pages(selected, scores, meta.context_lens, shape_.block_size, sink_pages_, recent_pages_, s);
  count_selection(selected, meta);
  return selected;
}

void SparseDecodePolicy::attend_selected(TensorView out, TensorView q, const LayerKvCache& kv,
                                         const AttentionMetadata& meta, TensorView selected, float scale,
                                         ops::Stream s, const ops::DualChunkParams* dca) {
  ops::sparse_decode_attention(out, q, kv.k, kv.v, meta.block_tables, meta.context_lens, selected, scale,
                               attention_scratch_.view(), dca, s);
}

void SparseDecodePolicy::count_selection(TensorView selected, const AttentionMetadata& meta) {
  ++counters_.sparse_layer_steps;
  if (!selected.device().is_cpu()) return;  // the counters read the selection on the host
  const int64_t S = meta.num_seqs, Hk = shape_.num_kv_heads, BS = shape_.block_size;
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();
  const int32_t* sel = selected.data_as<const int32_t>();
  for (int64_t i = 0; i < S * Hk; ++i) {
    const int64_t len = ctx[i / Hk];
    counters_.context_keys += len;
    for (int64_t j = 0; j < budget_pages_ && sel[i * budget_pages_ + j] >= 0; ++j)
      counters_.attended_keys += std::min(BS, len - sel[i * budget_pages_ + j] * BS);
  }
}

}  // namespace nanovllm
