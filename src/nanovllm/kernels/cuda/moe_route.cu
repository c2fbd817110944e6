// MoE routing and grouping (kernels/moe_ops.h): softmax + top-k (+ renormalisation) per token, and the
// grouping of the (token, slot) pairs by expert.
//
//   * route: one warp per token. Lane l holds the probabilities of experts l, l + 32, ... (E <= kMaxExperts:
//     at most 16 per lane, in registers); max and sum are warp reductions; the k choices are k warp argmax
//     rounds of two redux.sync each (larger probability first, on equal ones the lower expert id), the chosen
//     entry is taken out (moe_route_device.cuh).
//     fp32 throughout: exp(x - max) / sum, the renormalising sum over the k chosen in slot order.
//   * group: one CTA of 1024 threads: per-expert counts with shared-memory atomics, an exclusive scan into
//     expert_offsets, then each pair takes its row from its expert's cursor (atomic, so the order inside an
//     expert varies from run to run; every row's values are computed independently of its place). The
//     experts with pairs are compacted into active_experts in increasing order (a scan of the flags).
//   * route_group: both in one CTA for decode-sized steps (T <= kFusedMaxTokens): one launch instead of two
//     in the decode graphs.
// Launch shapes depend on T and E only (never on the routing), so CUDA graphs replay them as captured.
// PDL (pdl.cuh): every kernel reads its predecessor's output first, so it waits at once and then lets its own
// successor launch; the launch latency hides behind the predecessor's tail.
#include <cstdint>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/moe_route_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

using namespace moe_detail;

constexpr int kRouteWarps = 4;  // tokens per CTA of the route kernel
constexpr int kGroupThreads = 1024;

__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(RouteArgs a) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x * kRouteWarps + static_cast<int>(threadIdx.x >> 5);
  if (t < a.T) route_token(a, t, static_cast<int>(threadIdx.x & 31));
}

__global__ void __launch_bounds__(kGroupThreads) group_kernel(GroupArgs a) {
  pdl_wait();
  pdl_trigger();
  group_pairs(a);
}

__global__ void __launch_bounds__(kGroupThreads) route_group_kernel(RouteArgs r, GroupArgs g) {
  pdl_wait();
  pdl_trigger();
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  for (int t = warp; t < r.T; t += kGroupThreads / 32) route_token(r, t, lane);
  __syncthreads();  // the ids are this CTA's own global writes: visible to it after the barrier
  group_pairs(g);
}

}  // namespace

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize,
               ops::Stream s) {
  const int64_t T = router_logits.dim(0);
  if (T == 0) return;
  launch_pdl(route_kernel, dim3(ceil_div_u(T, kRouteWarps)), dim3(kRouteWarps * 32), 0, s,
             route_args(topk_ids, topk_weights, router_logits, renormalize));
}

void moe_group(const ops::MoeGroups& g, TensorView topk_ids, ops::Stream s) {
  launch_pdl(group_kernel, dim3(1), dim3(kGroupThreads), 0, s, group_args(g, topk_ids));
}

void moe_route_group(const ops::MoeGroups& g, TensorView topk_ids, TensorView topk_weights, TensorView router_logits,
                     bool renormalize, ops::Stream s) {
  const int64_t T = router_logits.dim(0);
  if (T > kFusedRouteMaxTokens) {
    cuda_ops::moe_route(topk_ids, topk_weights, router_logits, renormalize, s);
    cuda_ops::moe_group(g, topk_ids, s);
    return;
  }
  launch_pdl(route_group_kernel, dim3(1), dim3(kGroupThreads), 0, s,
             route_args(topk_ids, topk_weights, router_logits, renormalize), group_args(g, topk_ids));
}

}  // namespace nanovllm::cuda_ops
