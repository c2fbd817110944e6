// One rank's weights cut from the full host weights by its TensorParallelPlan: the CPU backend's TP
// simulation loads the checkpoint once and gives each rank thread its shard. (The CUDA loader will cut
// the same slices straight from the checkpoint, so a rank never holds the full model.)
#pragma once

#include "nanovllm/model/config.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/weights.h"

namespace nanovllm {

// Host (CPU) tensors in the full weights' dtypes, owned by the result. Shapes per rank:
// qkv [(h + 2 hk) D, H], o [H, h D], gate_up [2 I/N, H], down [H, I/N], embed / lm_head [ceil(V/N), H]
// (zero-padded; tied: one tensor), norms replicated, o_bias on rank 0 only (undefined elsewhere).
ModelWeights shard_weights(const ModelWeights& full, const ModelConfig& cfg, const TensorParallelPlan& plan);

}  // namespace nanovllm
