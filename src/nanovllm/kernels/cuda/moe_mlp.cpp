// The sparse MLP on CUDA (kernels/moe_ops.h, moe_mlp). One-token steps (bs = 1 decode, moe_decode_supported): the
// router projection, routing and grouping in one launch, the gate/up GEMV with SiLU·mul, the down GEMV with the
// combine folded in (moe_decode.cu): three launches. The fused kernels take up to kMoeDecodeMaxTokens tokens, but
// only one token wins its A/B (H200, 30B-A3B shape, one layer in a graph: T = 1 36.0 vs 39.6 us; T = 2 61.0 vs
// 58.1, T = 8 168 vs 144: the general kernels share each expert's weights between its tokens). Other steps: the router projection through the linear dispatch (cuBLASLt
// or the decode gemv), routing and grouping, the grouped expert GEMMs, the combine: five. Which runs depends on
// T and the shapes only, never on the routing; no host synchronisation. fp8 experts (docs/fp8.md) take the same
// launches with their fp8 kernels (one token: moe_fp8.cu; more: moe_experts.cu's kFp8 variants).
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm::cuda_ops {

void moe_mlp(TensorView out, TensorView x, TensorView router_w, const ops::MoeExpertWeights& experts, bool renormalize,
             const ops::MoeWorkspace& ws, ops::Stream s, MoeDecodePath path) {
  const ops::MoeWorkspace w = ws.first(x.dim(0));
  if (path == MoeDecodePath::kFused && x.dim(0) == 1 && w.router_logits.dtype() == DType::kBF16 &&
      moe_decode_supported(out, x, router_w, experts, w.topk_ids.dim(1), s)) {
    cuda_ops::moe_router_decode(x, router_w, w, renormalize, s);
    cuda_ops::moe_gate_up_decode(w.act, x, experts.gate_up, experts.gate_up_scale, w.groups, s);  // [P, Im]
    cuda_ops::moe_down_combine(out, w.act, experts.down, experts.down_scale, w.topk_weights, w.groups, s);
    return;
  }
  // Qualified: ops::Stream makes argument-dependent lookup find the ops:: entry points too.
  cuda_ops::linear(w.router_logits, x, router_w, TensorView(), s);  // [T, E]
  cuda_ops::moe_route_group(w.groups, w.topk_ids, w.topk_weights, w.router_logits, renormalize, s);
  cuda_ops::moe_experts(w.rows, x, experts, w.groups, w.act, s);  // [P, H]
  cuda_ops::moe_combine(out, w.rows, w.topk_weights, w.groups.pair_rows, s);
}

}  // namespace nanovllm::cuda_ops
