// CPU reference kernels of the sparse decode ops (kernels/sparse_ops.h has the contracts; the entry
// points validate before calling these). `dca` set: Dual Chunk Attention, q [3, ..., Hq, D] in its three
// rotations (dual_chunk_ops.h).
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm::cpu {

void quest_update_pages(TensorView k_min, TensorView k_max, const KvCacheTensor& k_cache, TensorView slot_mapping);
void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, const ops::DualChunkParams* dca);
void int4_keys_update(TensorView codes, TensorView scales, const KvCacheTensor& k_cache, TensorView slot_mapping);
void int4_key_scores(TensorView scores, TensorView q, TensorView codes, TensorView scales, TensorView block_tables,
                     TensorView context_lens, int64_t block_size);
void select_pages(TensorView selected, TensorView scores, TensorView context_lens, int64_t block_size,
                  int64_t sink_pages, int64_t recent_pages);
void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                             TensorView block_tables, TensorView context_lens, TensorView selected, float scale,
                             TensorView scratch, const ops::DualChunkParams* dca);
void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const ops::BlockSparsePattern& pattern, float scale,
                                    const ops::DualChunkParams* dca);

}  // namespace nanovllm::cpu
