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
// Steps of at most this many tokens (and pairs) run the decode kernels (moe_decode.cu): router projection,
// routing and grouping in one launch, the down projection with the combine folded in.
inline constexpr int64_t kMoeDecodeMaxTokens = kMoeGemvMaxTokens;
inline constexpr int64_t kMoeDecodeMaxPairs = 1024;  // the down kernel's shared memory: 32 bytes a pair

// Which kernels moe_mlp runs for a decode-sized step: the fused decode kernels (three launches) or the
// general path (router linear, route_group, experts, combine: five). Only benchmarks and tests pick kUnfused
// (the A/B of the fusion); the engine always runs the default.
enum class MoeDecodePath { kFused, kUnfused };

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize,
               ops::Stream s);
void moe_group(const ops::MoeGroups& g, TensorView topk_ids, ops::Stream s);
// moe_route then moe_group, in one launch when T <= kFusedRouteMaxTokens.
void moe_route_group(const ops::MoeGroups& g, TensorView topk_ids, TensorView topk_weights, TensorView router_logits,
                     bool renormalize, ops::Stream s);
// BF16 tensors, H and Im multiples of 8 (else a clear error); or fp8 experts (w.fp8(): the checks of
// ops::moe_experts) with BF16 activations: T <= kMoeGemvMaxTokens streams the codes through the tensor cores, longer
// steps run the tiled GEMM converting each weight tile to bf16 as it lands in shared memory (moe_experts.cu).
void moe_experts(TensorView rows, TensorView x, const ops::MoeExpertWeights& w, const ops::MoeGroups& g,
                 TensorView act, ops::Stream s);
void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows, ops::Stream s);
void moe_mlp(TensorView out, TensorView x, TensorView router_w, const ops::MoeExpertWeights& w, bool renormalize,
             const ops::MoeWorkspace& ws, ops::Stream s, MoeDecodePath path = MoeDecodePath::kFused);

// The decode kernels (moe_decode.cu). Whether moe_mlp's step (x [T, H], k experts per token) can run them:
// 1 <= T <= kMoeDecodeMaxTokens, T k <= kMoeDecodeMaxPairs, BF16 16-byte aligned tensors (the experts BF16,
// H and Im multiples of 8, or fp8 with H and Im multiples of 128), sm_90+ (the router is a thread-block cluster).
bool moe_decode_supported(TensorView out, TensorView x, TensorView router_w, const ops::MoeExpertWeights& w,
                          int64_t k, ops::Stream s);
// router_logits = x @ router_w^T (rounded to bf16), then moe_route and moe_group into w's views for T tokens,
// in one launch. x [T, H] BF16, router_w [E, H] BF16, T <= kMoeDecodeMaxTokens.
void moe_router_decode(TensorView x, TensorView router_w, const ops::MoeWorkspace& w, bool renormalize,
                       ops::Stream s);
// moe_experts' stage 1 (act[r] = silu(gate) * up) for decode-sized steps (T <= kMoeDecodeMaxTokens): act [P, Im] BF16.
// gate_up_w BF16 (gate_up_scale undefined), or F8E4M3 with its block scales [E, 2 Im / 128, H / 128]: then
// moe_fp8.h's moe_gate_up_fp8. k_parts: the warps that share an item, each over its part of K (BF16: 2, 4 or 8;
// fp8: 1, 2 or 4; 0 picks by the grid's size; tests and benchmarks pass each).
void moe_gate_up_decode(TensorView act, TensorView x, TensorView gate_up_w, TensorView gate_up_scale,
                        const ops::MoeGroups& g, ops::Stream s, int k_parts = 0);
// out[t] = sum over j of topk_weights[t, j] * bf16(down_w[e_j] @ act[row of pair t k + j]), fp32 in slot order
// (moe_experts' stage 2 and moe_combine in one launch). out [T, H], act [P, Im] BF16; down_w [E, H, Im] BF16
// (down_scale undefined), or F8E4M3 with its block scales [E, H / 128, Im / 128]: then moe_fp8.h's
// moe_down_combine_fp8.
void moe_down_combine(TensorView out, TensorView act, TensorView down_w, TensorView down_scale,
                      TensorView topk_weights, const ops::MoeGroups& g, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
