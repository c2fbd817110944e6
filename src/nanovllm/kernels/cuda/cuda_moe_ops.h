// CUDA entry points of the mixture-of-experts ops (kernels/moe_ops.h has the contracts), called after
// validation. Only in the CUDA build.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/moe_ops.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// Steps of at most this many tokens route and group in one single-CTA launch (moe_route_group).
inline constexpr int64_t kFusedRouteMaxTokens = 256;
// Steps of at most this many tokens run the experts through the weight-streaming kernel (each chosen expert's
// weights read once for all its rows); longer ones through the tiled tensor-core GEMM (moe_experts.cu).
inline constexpr int64_t kMoeGemvMaxTokens = 32;

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize,
               ops::Stream s);
void moe_group(const ops::MoeGroups& g, TensorView topk_ids, ops::Stream s);
// moe_route then moe_group, in one launch when T <= kFusedRouteMaxTokens.
void moe_route_group(const ops::MoeGroups& g, TensorView topk_ids, TensorView topk_weights, TensorView router_logits,
                     bool renormalize, ops::Stream s);
// BF16 tensors, H and Im multiples of 8 (else a clear error).
void moe_experts(TensorView rows, TensorView x, TensorView gate_up_w, TensorView down_w, const ops::MoeGroups& g,
                 TensorView act, ops::Stream s);
void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows, ops::Stream s);
void moe_mlp(TensorView out, TensorView x, TensorView router_w, TensorView gate_up_w, TensorView down_w,
             bool renormalize, const ops::MoeWorkspace& ws, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
