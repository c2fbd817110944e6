// MoE routing and grouping (kernels/moe_ops.h): softmax + top-k (+ renormalisation) per token, and the
// grouping of the (token, slot) pairs by expert.
//
//   * route: one warp per token. Lane l holds the probabilities of experts l, l + 32, ... (E <= kMaxExperts:
//     at most 16 per lane, in registers); max and sum are warp reductions; the k choices are k warp argmax
//     rounds (larger probability first, on equal ones the lower expert id), the chosen entry is taken out.
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

#include "nanovllm/core/limits.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kPerLane = static_cast<int>(kMaxExperts / 32);  // probabilities per lane
constexpr int kRouteWarps = 4;                                // tokens per CTA of the route kernel
constexpr int kGroupThreads = 1024;

struct RouteArgs {
  const void* logits;  // [T, E]
  int logits_dt;
  int32_t* ids;        // [T, k]
  float* weights;      // [T, k]
  int T, E, k;
  bool renormalize;
};

struct GroupArgs {
  const int32_t* ids;  // [P]
  int32_t* offsets;    // [E + 1]
  int32_t* sorted;     // [P]
  int32_t* pair_rows;  // [P]
  int32_t* active;     // [E]
  int P, E;
};

// Token t's routing by one warp.
__device__ void route_token(const RouteArgs& a, int t, int lane) {
  float p[kPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < a.E ? load_f32(a.logits, a.logits_dt, int64_t{t} * a.E + e) : -INFINITY;
    m = fmaxf(m, p[i]);
  }
  m = warp_max(m);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < a.E ? expf(p[i] - m) : -1.f;  // -1: below every probability (never chosen)
    sum += e < a.E ? p[i] : 0.f;
  }
  sum = warp_sum(sum);
  const float inv = 1.f / sum;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (p[i] >= 0.f) p[i] *= inv;
  float chosen_sum = 0.f;
  for (int j = 0; j < a.k; ++j) {
    // The lane's best remaining entry (its lowest expert id among equals: entries rise with i).
    float best = -2.f;
    int best_e = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (p[i] > best) {
        best = p[i];
        best_e = lane + 32 * i;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i == best_e) p[i] = -1.f;  // taken out
    chosen_sum += best;
    if (lane == 0) {
      a.ids[int64_t{t} * a.k + j] = best_e;
      a.weights[int64_t{t} * a.k + j] = best;
    }
  }
  if (a.renormalize && lane == 0) {
    const float inv_chosen = 1.f / chosen_sum;
    for (int j = 0; j < a.k; ++j) a.weights[int64_t{t} * a.k + j] *= inv_chosen;
  }
}

__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(RouteArgs a) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x * kRouteWarps + static_cast<int>(threadIdx.x >> 5);
  if (t < a.T) route_token(a, t, static_cast<int>(threadIdx.x & 31));
}

// Exclusive scan of v[0, n) in shared memory by the whole CTA (n <= blockDim.x); returns the total.
__device__ int block_exclusive_scan(int* v, int* tmp, int n) {
  const int i = static_cast<int>(threadIdx.x);
  for (int step = 1; step < n; step <<= 1) {  // Hillis-Steele inclusive scan through tmp
    if (i < n) tmp[i] = v[i] + (i >= step ? v[i - step] : 0);
    __syncthreads();
    if (i < n) v[i] = tmp[i];
    __syncthreads();
  }
  const int total = n > 0 ? v[n - 1] : 0;
  __syncthreads();
  if (i < n) tmp[i] = i > 0 ? v[i - 1] : 0;
  __syncthreads();
  if (i < n) v[i] = tmp[i];
  __syncthreads();
  return total;
}

// The grouping by one CTA (all threads call it).
__device__ void group_pairs(const GroupArgs& a) {
  __shared__ int count[kMaxExperts], cursor[kMaxExperts], flag[kMaxExperts], tmp[kMaxExperts];
  const int i = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  for (int e = i; e < a.E; e += n) count[e] = 0;
  __syncthreads();
  for (int p = i; p < a.P; p += n) atomicAdd(&count[a.ids[p]], 1);
  __syncthreads();
  for (int e = i; e < a.E; e += n) {
    flag[e] = count[e] > 0;
    cursor[e] = count[e];
  }
  __syncthreads();
  block_exclusive_scan(cursor, tmp, a.E);  // cursor[e] = expert e's first row
  block_exclusive_scan(flag, count, a.E);  // flag[e] = active experts before e (count is free now)
  for (int e = i; e < a.E; e += n) {
    a.offsets[e] = cursor[e];
    a.active[e] = -1;
  }
  if (i == 0) a.offsets[a.E] = a.P;
  __syncthreads();
  for (int e = i; e < a.E; e += n) {
    const int next = e + 1 < a.E ? cursor[e + 1] : a.P;
    if (next > cursor[e]) a.active[flag[e]] = e;
  }
  __syncthreads();
  for (int p = i; p < a.P; p += n) {
    const int r = atomicAdd(&cursor[a.ids[p]], 1);
    a.sorted[r] = p;
    a.pair_rows[p] = r;
  }
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

RouteArgs route_args(TensorView ids, TensorView weights, TensorView logits, bool renormalize) {
  return {logits.data(), dt(logits), ids.data_as<int32_t>(), weights.data_as<float>(),
          static_cast<int>(logits.dim(0)), static_cast<int>(logits.dim(1)), static_cast<int>(ids.dim(1)), renormalize};
}

GroupArgs group_args(const ops::MoeGroups& g, TensorView ids) {
  return {ids.data_as<const int32_t>(), g.expert_offsets.data_as<int32_t>(), g.sorted_pairs.data_as<int32_t>(),
          g.pair_rows.data_as<int32_t>(), g.active_experts.data_as<int32_t>(), static_cast<int>(ids.numel()),
          static_cast<int>(g.expert_offsets.dim(0) - 1)};
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
