// quest_scores on tensor cores (sparse_decode.cu's quest_scores calls it first): head_dim 64 / 128 / 256, GQA
// groups of up to 8 query heads, no Dual Chunk Attention.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// Launches the kernel and returns true when the shapes are ones it takes (contract: ops::quest_scores, bf16 q
// [S, Hq, D] and metadata [NB, Hk, D]); false: nothing launched.
bool quest_scores_tensor_cores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max,
                               TensorView block_tables, TensorView context_lens, int64_t block_size, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif
