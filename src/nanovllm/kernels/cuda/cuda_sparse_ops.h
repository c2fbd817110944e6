// CUDA entry points of the sparse attention ops (kernels/sparse_ops.h has the contracts), called after
// validation. bf16 caches, queries and metadata. Only in the CUDA build. `dca` set: Dual Chunk Attention, q
// [3, ..., Hq, D] in its three rotations.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/sparse_ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// An fp8 KV cache (kv_fp8.cuh): quest_update_pages folds the dequantized keys into bf16 metadata rounded outward,
// sparse_decode_attention dequantizes as it reads; block_sparse_prefill_attention refuses it (bf16 wgmma only).
void quest_update_pages(TensorView k_min, TensorView k_max, const KvCacheTensor& k_cache, TensorView slot_mapping,
                        ops::Stream s);
void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, const ops::DualChunkParams* dca, ops::Stream s);
// int4_keys.cu: a bf16 or fp8 cache; q bf16.
void int4_keys_update(TensorView codes, TensorView scales, const KvCacheTensor& k_cache, TensorView slot_mapping,
                      ops::Stream s);
void int4_key_scores(TensorView scores, TensorView q, TensorView codes, TensorView scales, TensorView block_tables,
                     TensorView context_lens, int64_t block_size, ops::Stream s);
void select_pages(TensorView selected, TensorView scores, TensorView context_lens, int64_t block_size,
                  int64_t sink_pages, int64_t recent_pages, ops::Stream s);
void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                             const KvCacheTensor& v_cache, TensorView block_tables, TensorView context_lens,
                             TensorView selected, float scale, TensorView scratch, const ops::DualChunkParams* dca,
                             ops::Stream s);
// The DCA case of sparse_decode_attention (dual_chunk_sparse_decode.cu); q [3, S, Hq, D]; bf16 caches only.
void dual_chunk_sparse_decode_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                                        TensorView block_tables, TensorView context_lens, TensorView selected,
                                        const ops::DualChunkParams& dca, float scale, ops::Stream s);
void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache,
                                    const AttentionMetadata& meta, const ops::BlockSparsePattern& pattern,
                                    float scale, const ops::DualChunkParams* dca, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
