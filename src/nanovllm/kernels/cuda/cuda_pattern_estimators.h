// CUDA entry points of the sparse prefill pattern estimators (kernels/pattern_estimators.h has the contracts), called
// after validation. q and k_cache F32 / BF16 / F16 (one dtype), or bf16 q and an fp8 cache (codes and row scales,
// kernels/kv_cache.h); metadata and pattern views on the device. Only in the CUDA build.
// `dca` set: Dual Chunk Attention, q [3, T, Hq, D] in its three rotations.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/estimator_params.h"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/sparse_ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void xattention_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                         const AttentionMetadata& meta, float scale, const ops::XAttentionParams& params,
                         const ops::DualChunkParams* dca, ops::Stream s);
void avgpool_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                      const AttentionMetadata& meta, float scale, const ops::AvgPoolParams& params,
                      const ops::DualChunkParams* dca, ops::Stream s);
void vertical_slash_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                             const AttentionMetadata& meta, float scale, const ops::VerticalSlashParams& params,
                             const ops::DualChunkParams* dca, ops::Stream s);
void flexprefill_estimate(const ops::BlockSparsePattern& pattern, TensorView q, const KvCacheTensor& k_cache,
                          const AttentionMetadata& meta, float scale, const ops::FlexPrefillParams& params,
                          const ops::DualChunkParams* dca, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
