// The sparse MLP on CUDA (kernels/moe_ops.h, moe_mlp): the router projection through the linear dispatch
// (cuBLASLt or the decode gemv), routing and grouping (one fused launch for decode-sized steps), the grouped
// expert GEMMs, the combine. Five launches whatever the routing; no host synchronisation.
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm::cuda_ops {

void moe_mlp(TensorView out, TensorView x, TensorView router_w, TensorView gate_up_w, TensorView down_w,
             bool renormalize, const ops::MoeWorkspace& ws, ops::Stream s) {
  const ops::MoeWorkspace w = ws.first(x.dim(0));
  // Qualified: ops::Stream makes argument-dependent lookup find the ops:: entry points too.
  cuda_ops::linear(w.router_logits, x, router_w, TensorView(), s);  // [T, E]
  cuda_ops::moe_route_group(w.groups, w.topk_ids, w.topk_weights, w.router_logits, renormalize, s);
  cuda_ops::moe_experts(w.rows, x, gate_up_w, down_w, w.groups, w.act, s);  // [P, H]
  cuda_ops::moe_combine(out, w.rows, w.topk_weights, w.groups.pair_rows, s);
}

}  // namespace nanovllm::cuda_ops
