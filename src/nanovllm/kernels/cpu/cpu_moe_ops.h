// CPU reference kernels of the mixture-of-experts ops (kernels/moe_ops.h has the contracts; the entry
// points validate before calling these).
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/moe_ops.h"

namespace nanovllm::cpu {

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize);
void moe_group(const ops::MoeGroups& g, TensorView topk_ids);
void moe_experts(TensorView rows, TensorView x, TensorView gate_up_w, TensorView down_w, const ops::MoeGroups& g,
                 TensorView act);
void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows);

}  // namespace nanovllm::cpu
