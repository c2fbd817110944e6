// Device code of the MoE routing and grouping shared by moe_route.cu (route, group, route_group) and
// moe_decode.cu (the decode step's router: projection, routing and grouping in one launch). The algorithms
// are described in moe_route.cu; every kernel that routes calls route_token and every one that groups calls
// group_pairs, so their results are the same whichever launch runs them.
#pragma once

#include <cstdint>

#include "nanovllm/core/limits.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/moe_ops.h"

namespace nanovllm::cuda_ops::moe_detail {

constexpr int kPerLane = static_cast<int>(kMaxExperts / 32);  // probabilities per lane

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

// Token t's routing by one warp: the softmax in registers, then the top k by two reductions a pick — redux.sync max
// over keys that order the probabilities (a non-negative float's bits as an unsigned integer, plus one; 0 for an
// entry taken or past E), then redux.sync min over the expert ids holding that key (the lower id first among equal
// probabilities) — instead of five rounds of paired shuffles. Pick j's expert and weight stay in lane j % 32's
// registers until every pick is known: one store each, renormalized there (H200, the 30B-A3B decode router: the
// routing of one token 3.5 -> 2.9 us, bench/results/2026-11-30/s44).
__device__ inline void route_token(const RouteArgs& a, int t, int lane) {
  constexpr unsigned kAll = 0xffffffffu;
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
  float my_weight[kPerLane] = {};  // pick j = lane + 32 r in entry r
  int my_id[kPerLane] = {};
  for (int j = 0; j < a.k; ++j) {
    // The lane's best remaining entry (its lowest expert id among equals: entries rise with i).
    float best = -2.f;
    int best_i = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (p[i] > best) {
        best = p[i];
        best_i = i;
      }
    const unsigned key = best >= 0.f ? __float_as_uint(best) + 1u : 0u;
    const unsigned top = __reduce_max_sync(kAll, key);
    const int best_e = static_cast<int>(__reduce_min_sync(kAll, key == top ? static_cast<unsigned>(lane + 32 * best_i)
                                                                             : 0xffffffffu));
    const float chosen = __uint_as_float(top - 1u);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i == best_e) p[i] = -1.f;  // taken out
    chosen_sum += chosen;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r)
      if (lane + 32 * r == j) {
        my_weight[r] = chosen;
        my_id[r] = best_e;
      }
  }
  const float inv_chosen = a.renormalize ? 1.f / chosen_sum : 1.f;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int j = lane + 32 * r;
    if (j >= a.k) break;
    a.ids[int64_t{t} * a.k + j] = my_id[r];
    a.weights[int64_t{t} * a.k + j] = a.renormalize ? my_weight[r] * inv_chosen : my_weight[r];
  }
}

// Exclusive scan of v[0, n) in shared memory by the whole CTA (n <= blockDim.x); returns the total.
__device__ inline int block_exclusive_scan(int* v, int* tmp, int n) {
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
__device__ inline void group_pairs(const GroupArgs& a) {
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

// group_pairs' results for at most 32 pairs, by one warp (all its lanes call it; the ids visible to them): no block
// barriers. Lane p holds pair p's expert; expert e's first row is the number of pairs of lower experts, pair p's row
// that plus the pairs of its expert before it (the rows inside an expert in pair order: one of the orders
// group_pairs' atomics give).
__device__ inline void group_pairs_warp(const GroupArgs& a, int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  const int id = lane < a.P ? a.ids[lane] : 0x7fffffff;
  int lower = 0, same_before = 0;  // pairs of lower experts; pairs of this expert before this one
  for (int q = 0; q < a.P; ++q) {
    const int other = __shfl_sync(kAll, id, q);
    lower += other < id;
    same_before += other == id && q < lane;
  }
  // Experts in chunks of 32, a lane each: first row (pairs of lower experts) and whether any pair chose it.
  int active_before = 0;  // active experts in earlier chunks
  for (int base = 0; base < a.E; base += 32) {
    const int e = base + lane;
    int first = 0, mine = 0;
    for (int q = 0; q < a.P; ++q) {
      const int other = __shfl_sync(kAll, id, q);
      first += other < e;
      mine += other == e;
    }
    const unsigned active = __ballot_sync(kAll, e < a.E && mine > 0);
    if (e < a.E) {
      a.offsets[e] = first;
      a.active[e] = -1;
    }
    __syncwarp();  // the -1s before the entries below (an entry's index is at most its expert: this chunk or earlier)
    if (e < a.E && mine > 0) a.active[active_before + __popc(active & ((1u << lane) - 1u))] = e;
    active_before += __popc(active);
    __syncwarp();
  }
  if (lane == 0) a.offsets[a.E] = a.P;
  if (lane < a.P) {
    const int r = lower + same_before;
    a.sorted[r] = lane;
    a.pair_rows[lane] = r;
  }
}

inline RouteArgs route_args(TensorView ids, TensorView weights, TensorView logits, bool renormalize) {
  return {logits.data(), dt(logits), ids.data_as<int32_t>(), weights.data_as<float>(),
          static_cast<int>(logits.dim(0)), static_cast<int>(logits.dim(1)), static_cast<int>(ids.dim(1)), renormalize};
}

inline GroupArgs group_args(const ops::MoeGroups& g, TensorView ids) {
  return {ids.data_as<const int32_t>(), g.expert_offsets.data_as<int32_t>(), g.sorted_pairs.data_as<int32_t>(),
          g.pair_rows.data_as<int32_t>(), g.active_experts.data_as<int32_t>(), static_cast<int>(ids.numel()),
          static_cast<int>(g.expert_offsets.dim(0) - 1)};
}

}  // namespace nanovllm::cuda_ops::moe_detail
