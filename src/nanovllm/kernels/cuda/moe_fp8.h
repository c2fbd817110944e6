// The fp8 experts' weight-streaming kernels (moe_fp8.cu), internal to the MoE ops: moe_gate_up_decode /
// moe_down_combine run them for F8E4M3 weights (the decode path; moe_experts' steps take moe_experts.cu's
// tensor-core kernels). Block-scaled fp8 as docs/fp8.md: e4m3 codes, one f32
// scale per 128 x 128 block of each expert's matrix; H and Im multiples of 128 (the loader keeps experts fp8 only
// then). Activations BF16. Callers have validated the op; these check what the kernels rely on.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/moe_ops.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// act[r] = bf16(silu(bf16(gate)) * bf16(up)), [gate | up] = dequant(gate_up_w[e]) @ x[token of r] for the rows
// r of every active expert e. x [T, H] (1 <= T <= kMoeGemvMaxTokens), act [P, Im]; gate_up_w [E, 2 Im, H] F8E4M3,
// gate_up_scale [E, 2 Im / 128, H / 128] F32. k_parts: warps sharing an item's K (1, 2 or 4; 0 picks).
void moe_gate_up_fp8(TensorView act, TensorView x, TensorView gate_up_w, TensorView gate_up_scale,
                     const ops::MoeGroups& g, ops::Stream s, int k_parts = 0);
// moe_down_combine's contract with fp8 down weights: out [T, H] = sum over j of topk_weights[t, j] *
// bf16(dequant(down_w[e_j]) @ act[row of pair t k + j]), fp32 in slot order; T k <= kMoeDecodeMaxPairs.
void moe_down_combine_fp8(TensorView out, TensorView act, TensorView down_w, TensorView down_scale,
                          TensorView topk_weights, const ops::MoeGroups& g, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
