// CPU reference kernels of Dual Chunk Attention (kernels/dual_chunk_ops.h has the contracts; the entry points
// validate before calling these).
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/dual_chunk_ops.h"

namespace nanovllm::cpu {

// inv_freq [D/2] f32 on the host (rotate_half over the whole head).
void dual_chunk_qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                             TensorView positions, const float* inv_freq, float attention_scaling,
                             const ops::DualChunkParams& dca, TensorView k_cache, TensorView v_cache,
                             const AttentionMetadata& meta);
void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale);

}  // namespace nanovllm::cpu
