// CUDA entry points of the Dual Chunk Attention ops (kernels/dual_chunk_ops.h has the contracts), called after
// validation. bf16 queries, caches and outputs. Only in the CUDA build.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/dual_chunk_ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void dual_chunk_qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                             TensorView positions, const ops::RopeParams& rope, const ops::DualChunkParams& dca,
                             TensorView k_cache, TensorView v_cache, const AttentionMetadata& meta, ops::Stream s);
void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
