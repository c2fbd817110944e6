// CUDA entry points of the mixture-of-experts ops (kernels/moe_ops.h has the contracts), called after
// validation. Only in the CUDA build.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/moe_ops.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize,
               ops::Stream s);
void moe_group(const ops::MoeGroups& g, TensorView topk_ids, ops::Stream s);
void moe_experts(TensorView rows, TensorView x, TensorView gate_up_w, TensorView down_w, const ops::MoeGroups& g,
                 TensorView act, ops::Stream s);
void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
