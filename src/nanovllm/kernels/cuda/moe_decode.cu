// The sparse MLP's kernels for decode-sized steps (T <= kMoeDecodeMaxTokens; moe_mlp.cpp picks them): three
// launches per layer instead of five, each streaming its weights with the GPU's SMs busy.
//
//   * moe_router_decode: router projection + routing + grouping in ONE launch, a cluster of kRouterCtas CTAs.
//     Each CTA computes the logits of E / kRouterCtas experts (a warp per expert row: fp32 products summed
//     per lane over its 16-byte vectors, then a warp reduction; its first 2048 columns are loaded into registers
//     before the PDL wait, so Qwen3-30B-A3B's whole 0.5 MB router is in flight during the previous kernel), rounds
//     them to the activation dtype as the linear path does (transformers rounds the gate's output too) and
//     stores them to ws.router_logits. After a cluster barrier (release / acquire: the peers' stores are
//     visible) CTA 0 routes every token with moe_route's route_token and groups the pairs with group_pairs
//     (moe_route_device.cuh; at most 32 pairs: group_pairs_warp, one warp without block barriers): the routing of
//     given logits is the one moe_route / moe_group compute, bit for bit, ties included. The logits themselves may
//     differ from the cuBLASLt / gemv projection's in the last bf16 place (another fp32 summation order), as two
//     GEMM libraries would.
//   * moe_gate_up_decode: gate / up with SiLU·mul, a warp item per (active expert slot, 8 activation columns,
//     part of K): the 16-row mma tile is the 8 gate rows and the matching 8 up rows, so a lane ends with the
//     gate and up of its column; the K parts (2, 4 or 8 warps of a CTA, k_parts) add through shared memory in K
//     order; then moe_gemv's epilogue (gate and up rounded to bf16, silu(gate) * up rounded to bf16). The grid
//     covers min(E, P) slots x Im / 8 column tiles in 8-warp CTAs (at bs = 1 on Qwen3-30B-A3B: 192 CTAs of
//     64 KB each, 2 parts, resident at once — moe_gemv's 384 CTAs of 128 KB ran in 1.5 waves); more parts where
//     the grid would leave SMs idle (a tensor-parallel rank's share of Im). Slots past the active experts exit at
//     once.
//   * moe_down_combine: the down projection with the combine folded in. A CTA per 16 output columns; its warp
//     w takes the active experts w, w + 8, ... (at bs = 1: the 8 chosen experts, one per warp) and streams
//     their 16 weight rows over all of K with gemv's warp step (mma.sync m16n8k16: the weight rows as the
//     16-row operand, the expert's activation rows — at most T — as the 8-wide one), one flat double-buffered
//     loop over (expert, K step) so the next expert's loads fly during this one's products. Each expert row's
//     16 outputs are rounded to bf16 — the value moe_experts stores in ws.rows — into shared memory at its
//     pair's place; then out[t, c] = sum over j of topk_weights[t, j] * value[t k + j, c] in fp32, in slot
//     order, rounded to bf16: moe_combine's formula on moe_experts' values. The only difference from the
//     unfused path is an expert output's fp32 sum order (one warp over all of K here, four K groups added
//     there): at most one bf16 place of an expert row, before the weighting. No ws.rows, no combine launch.
// Launch shapes depend on T, E, k and the sizes only, never on the routing, so CUDA graphs replay them; all
// three are PDL launches (pdl.cuh) that read their predecessor's outputs right after the wait. fp8 experts
// (docs/fp8.md) take the same router and, for gate / up and down + combine, moe_fp8.cu's kernels.
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/cluster.cuh"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/moe_fp8.h"
#include "nanovllm/kernels/cuda/moe_route_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

using namespace moe_detail;

// ---- moe_router_decode ------------------------------------------------------------------------------------
constexpr int kRouterCtas = 8;                       // one portable cluster
constexpr int kRouterThreads = 512;                  // group_pairs scans E <= kMaxExperts entries, one a thread
constexpr int kRouterWarps = kRouterThreads / 32;
constexpr int kRouterVecs = 8;                       // 16-byte vectors a lane holds: 2048 columns a warp pass
static_assert(kRouterThreads >= kMaxExperts, "group_pairs needs a thread per expert");

struct RouterArgs {
  const __nv_bfloat16* x;  // [T, H]
  const __nv_bfloat16* w;  // [E, H]
  __nv_bfloat16* logits;   // [T, E]
  int T, H, E;
};

// The lane's vectors [vb + lane + 32 i] of one router row (zero past the row).
__device__ __forceinline__ void load_router_chunk(const uint4* row, int vb, int Hv, int lane, uint4 (&w)[kRouterVecs]) {
#pragma unroll
  for (int i = 0; i < kRouterVecs; ++i) {
    const int v = vb + lane + 32 * i;
    w[i] = v < Hv ? gemv_detail::ld_weight(row + v) : make_uint4(0, 0, 0, 0);
  }
}

__global__ void __launch_bounds__(kRouterThreads, 1) moe_router_decode_kernel(RouterArgs a, RouteArgs r, GroupArgs g) {
  __shared__ float part[kRouterWarps][kMoeDecodeMaxTokens];  // a warp's running sums (lane 0's)
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int per_cta = (a.E + kRouterCtas - 1) / kRouterCtas;
  const int e_begin = static_cast<int>(blockIdx.x) * per_cta, e_end = min(a.E, e_begin + per_cta);
  const int Hv = a.H / 8;
  const uint4* w = reinterpret_cast<const uint4*>(a.w);
  // Prologue (weights only, pdl.cuh): the warp's first row chunk.
  uint4 wv[kRouterVecs];
  if (e_begin + warp < e_end) load_router_chunk(w + int64_t{e_begin + warp} * Hv, 0, Hv, lane, wv);
  pdl_wait();
  pdl_trigger();
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  for (int e = e_begin + warp; e < e_end; e += kRouterWarps) {
    for (int vb = 0; vb < Hv; vb += 32 * kRouterVecs) {
      if (e != e_begin + warp || vb != 0) load_router_chunk(w + int64_t{e} * Hv, vb, Hv, lane, wv);
      for (int t = 0; t < a.T; ++t) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < kRouterVecs; ++i) {
          const int v = vb + lane + 32 * i;
          if (v >= Hv) break;
          float wf[8], xf[8];
          bf16x8_to_f32(wv[i], wf);
          bf16x8_to_f32(__ldg(x + int64_t{t} * Hv + v), xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) s = fmaf(wf[j], xf[j], s);
        }
        s = warp_sum(s);
        if (lane == 0) part[warp][t] = vb == 0 ? s : part[warp][t] + s;
      }
    }
    if (lane == 0)
      for (int t = 0; t < a.T; ++t) a.logits[int64_t{t} * a.E + e] = __float2bfloat16_rn(part[warp][t]);
  }
  __threadfence();
  cluster_sync();  // every CTA's logits are stored and visible to the cluster
  if (blockIdx.x != 0) return;
  for (int t = warp; t < a.T; t += kRouterWarps) route_token(r, t, lane);
  __syncthreads();  // the ids are this CTA's own global writes: visible to it after the barrier
  if (g.P <= 32) {  // a few tokens: one warp groups them, without group_pairs' ~40 block barriers
    if (warp == 0) group_pairs_warp(g, lane);
    return;
  }
  group_pairs(g);
}

// ---- moe_gate_up_decode -----------------------------------------------------------------------------------
constexpr int kGuCols = 8;  // activation columns of a warp item: 8 gate + 8 up rows

struct GateUpArgs {
  const __nv_bfloat16* x;  // [T, H]
  const __nv_bfloat16* w;  // [E, 2 Im, H]
  __nv_bfloat16* act;      // [P, Im]
  const int32_t* offsets;  // [E + 1]
  const int32_t* sorted;   // [P]
  const int32_t* active;   // [E]
  int K, N, k, slots;      // K = H, N = Im, slots = min(E, P)
};

// kParts warps share an item, each over its part of K (the parts' partial sums add in shared memory, in part
// order): items = kWarps / kParts per CTA.
template <int kNT, int kParts>
__global__ void __launch_bounds__(gemv_detail::kThreads) moe_gate_up_decode_kernel(GateUpArgs a) {
  using namespace gemv_detail;
  constexpr int kItems = kWarps / kParts;
  __shared__ float red[kItems][kParts - 1][32][kNT * 4];  // parts 1.. of each item's fragments
  pdl_wait();
  pdl_trigger();
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int gq = lane >> 2, q = lane & 3, part = warp % kParts, local = warp / kParts;
  const int tiles = a.N / kGuCols;
  const int item = static_cast<int>(blockIdx.x) * kItems + local, slot = item / tiles;
  const int e = slot < a.slots ? a.active[slot] : -1;
  float acc[kNT][4] = {};
  int r0 = 0, n = 0;
  const int c = (item % tiles) * kGuCols + gq;  // this lane's activation column
  if (e >= 0) {
    r0 = a.offsets[e];
    n = a.offsets[e + 1] - r0;
    const int Kv = a.K / 8, steps = (Kv + kStepVecs - 1) / kStepVecs;
    const int s0 = steps * part / kParts, s1 = steps * (part + 1) / kParts;
    const uint4* w_lo = reinterpret_cast<const uint4*>(a.w + (int64_t{e} * 2 * a.N + c) * a.K);        // gate row
    const uint4* w_hi = reinterpret_cast<const uint4*>(a.w + (int64_t{e} * 2 * a.N + a.N + c) * a.K);  // up row
    const uint4* xr[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      xr[nt] = reinterpret_cast<const uint4*>(a.x + int64_t{a.sorted[r0 + min(gq + 8 * nt, n - 1)] / a.k} * a.K);
    uint4 lo0[kU], hi0[kU], lo1[kU], hi1[kU];
    if (s0 < s1) load_w_step(w_lo, w_hi, s0 * kStepVecs, Kv, q, lo0, hi0);
    for (int s = s0; s < s1; s += 2) {  // two register buffers: the next step's loads fly during the products
      if (s + 1 < s1) load_w_step(w_lo, w_hi, (s + 1) * kStepVecs, Kv, q, lo1, hi1);
      mma_step<kNT, kXGlobal>(acc, lo0, hi0, xr, s * kStepVecs, Kv, q, Kv);
      if (s + 1 >= s1) break;
      if (s + 2 < s1) load_w_step(w_lo, w_hi, (s + 2) * kStepVecs, Kv, q, lo0, hi0);
      mma_step<kNT, kXGlobal>(acc, lo1, hi1, xr, (s + 1) * kStepVecs, Kv, q, Kv);
    }
  }
  if (part > 0)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[local][part - 1][lane][4 * nt + i] = acc[nt][i];
  __syncthreads();
  if (part > 0 || e < 0) return;
  // Fragment i of tile nt: row gq + 8 (i / 2) — the gate (i < 2) or up (i >= 2) row of column c —, token
  // 8 nt + 2 q + i % 2. The parts in K order, then moe_gemv's epilogue: silu(bf16(gate)) * bf16(up).
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int tok = 8 * nt + 2 * q + j;
      if (tok >= n) continue;
      float gate = acc[nt][j], up = acc[nt][2 + j];
#pragma unroll
      for (int p = 0; p < kParts - 1; ++p) {
        gate += red[local][p][lane][4 * nt + j];
        up += red[local][p][lane][4 * nt + 2 + j];
      }
      const float y = silu(__bfloat162float(__float2bfloat16_rn(gate))) * __bfloat162float(__float2bfloat16_rn(up));
      a.act[int64_t{r0 + tok} * a.N + c] = __float2bfloat16_rn(y);
    }
}

// CTAs of moe_gate_up_decode_kernel<., k_parts>: an item per (expert slot, kGuCols columns), kWarps / k_parts a CTA.
unsigned gate_up_ctas(int64_t slots, int64_t N, int k_parts) {
  return ceil_div_u(slots * (N / kGuCols), gemv_detail::kWarps / k_parts);
}

template <int kParts>
void launch_gate_up_decode(const GateUpArgs& a, int64_t T, ops::Stream s) {
  const dim3 grid(gate_up_ctas(a.slots, a.N, kParts)), block(gemv_detail::kThreads);
  if (T <= 8) launch_pdl(moe_gate_up_decode_kernel<1, kParts>, grid, block, 0, s, a);
  else if (T <= 16) launch_pdl(moe_gate_up_decode_kernel<2, kParts>, grid, block, 0, s, a);
  else launch_pdl(moe_gate_up_decode_kernel<4, kParts>, grid, block, 0, s, a);
}

// ---- moe_down_combine -------------------------------------------------------------------------------------
constexpr int kDcCols = 16;  // output columns per CTA: one 16-row mma tile of every active expert

struct DownCombineArgs {
  const __nv_bfloat16* act;  // [P, Im]: row r of the grouping (silu(gate) * up)
  const __nv_bfloat16* w;    // [E, H, Im]
  __nv_bfloat16* out;        // [T, H]
  const float* weights;      // [T, k]
  const int32_t* offsets;    // [E + 1]
  const int32_t* sorted;     // [P]
  const int32_t* active;     // [E]
  int K, N, T, k, slots;     // K = Im, N = H, slots = min(E, P): the active list's possible length
};

template <int kNT>  // 8-token B tiles: an expert has at most T <= 8 kNT rows
__global__ void __launch_bounds__(gemv_detail::kThreads) moe_down_combine_kernel(DownCombineArgs a) {
  using namespace gemv_detail;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* vals = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [P][kDcCols]: pair p's outputs
  pdl_wait();
  pdl_trigger();
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int gq = lane >> 2, q = lane & 3;
  const int c0 = static_cast<int>(blockIdx.x) * kDcCols;
  const int Kv = a.K / 8, steps = (Kv + kStepVecs - 1) / kStepVecs;
  int items = 0;  // the warp's experts: active slots warp, warp + kWarps, ... (the list ends with -1s)
  while (warp + kWarps * items < a.slots && a.active[warp + kWarps * items] >= 0) ++items;
  const int total = items * steps;
  auto expert_of = [&](int f) { return a.active[warp + kWarps * (f / steps)]; };
  auto load = [&](int f, uint4(&lo)[kU], uint4(&hi)[kU]) {
    const int64_t base = int64_t{expert_of(f)} * a.N;
    const uint4* w_lo = reinterpret_cast<const uint4*>(a.w + (base + min(c0 + gq, a.N - 1)) * a.K);
    const uint4* w_hi = reinterpret_cast<const uint4*>(a.w + (base + min(c0 + gq + 8, a.N - 1)) * a.K);
    load_w_step(w_lo, w_hi, (f % steps) * kStepVecs, Kv, q, lo, hi);
  };
  float acc[kNT][4] = {};
  auto compute = [&](int f, const uint4(&lo)[kU], const uint4(&hi)[kU]) {
    const int e = expert_of(f), r0 = a.offsets[e], n = a.offsets[e + 1] - r0;
    const uint4* xr[kNT];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      xr[nt] = reinterpret_cast<const uint4*>(a.act + int64_t{r0 + min(gq + 8 * nt, n - 1)} * a.K);
    mma_step<kNT, kXGlobal>(acc, lo, hi, xr, (f % steps) * kStepVecs, Kv, q, Kv);
    if (f % steps != steps - 1) return;
    // The expert's 16 x n outputs: fragment i of tile nt is row gq + 8 (i / 2), token 8 nt + 2 q + i % 2.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 8 * nt + 2 * q + (i & 1), row = gq + 8 * (i >> 1);
        if (tok < n) vals[a.sorted[r0 + tok] * kDcCols + row] = __float2bfloat16_rn(acc[nt][i]);
        acc[nt][i] = 0.f;
      }
  };
  uint4 lo0[kU], hi0[kU], lo1[kU], hi1[kU];
  if (total > 0) load(0, lo0, hi0);
  for (int f = 0; f < total; f += 2) {  // two register buffers: the next step's loads fly during the products
    if (f + 1 < total) load(f + 1, lo1, hi1);
    compute(f, lo0, hi0);
    if (f + 1 >= total) break;
    if (f + 2 < total) load(f + 2, lo0, hi0);
    compute(f + 1, lo1, hi1);
  }
  __syncthreads();
  // The combine: moe_combine's fp32 sum in slot order over the bf16 expert outputs.
  for (int o = static_cast<int>(threadIdx.x); o < a.T * kDcCols; o += kThreads) {
    const int t = o / kDcCols, c = o % kDcCols;
    if (c0 + c >= a.N) continue;
    float y = 0.f;
    for (int j = 0; j < a.k; ++j)
      y += a.weights[t * a.k + j] * __bfloat162float(vals[(t * a.k + j) * kDcCols + c]);
    a.out[int64_t{t} * a.N + c0 + c] = __float2bfloat16_rn(y);
  }
}

}  // namespace

bool moe_decode_supported(TensorView out, TensorView x, TensorView router_w, const ops::MoeExpertWeights& w,
                          int64_t k, ops::Stream s) {
  const int64_t T = x.dim(0), H = x.dim(1), Im = w.down.dim(2);
  for (const TensorView* t : {&out, &x, &router_w})
    if (t->dtype() != DType::kBF16 || !aligned16(t->data())) return false;
  const DType expert_dtype = w.fp8() ? DType::kF8E4M3 : DType::kBF16;
  for (const TensorView* t : {&w.gate_up, &w.down})
    if (t->dtype() != expert_dtype || !aligned16(t->data())) return false;
  const int64_t multiple = w.fp8() ? 128 : 8;
  return T >= 1 && T <= kMoeDecodeMaxTokens && T * k <= kMoeDecodeMaxPairs && H % multiple == 0 &&
         Im % multiple == 0 && w.gate_up.dim(0) <= kMaxExperts && context_of(s).compute_major() >= 9;
}

void moe_router_decode(TensorView x, TensorView router_w, const ops::MoeWorkspace& w, bool renormalize,
                       ops::Stream s) {
  const int64_t T = x.dim(0);
  NANOVLLM_CHECK(T >= 1 && T <= kMoeDecodeMaxTokens && x.dtype() == DType::kBF16 && router_w.dtype() == DType::kBF16 &&
                     w.router_logits.dtype() == DType::kBF16 && x.dim(1) % 8 == 0 && aligned16(x.data()) &&
                     aligned16(router_w.data()),
                 "moe_router_decode (CUDA): needs 1 to ", kMoeDecodeMaxTokens, " BF16 tokens with a hidden size ",
                 "that is a multiple of 8, got x ", x.shape().str(), " ", dtype_name(x.dtype()));
  const RouterArgs ra{x.data_as<const __nv_bfloat16>(), router_w.data_as<const __nv_bfloat16>(),
                      w.router_logits.data_as<__nv_bfloat16>(), static_cast<int>(T), static_cast<int>(x.dim(1)),
                      static_cast<int>(router_w.dim(0))};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kRouterCtas);
  cfg.blockDim = dim3(kRouterThreads);
  cfg.stream = stream_of(s);
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kRouterCtas;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = context_of(s).use_pdl() ? 2 : 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, moe_router_decode_kernel, ra,
                                route_args(w.topk_ids, w.topk_weights, w.router_logits, renormalize),
                                group_args(w.groups, w.topk_ids)));
}

void moe_gate_up_decode(TensorView act, TensorView x, TensorView gate_up_w, TensorView gate_up_scale,
                        const ops::MoeGroups& g, ops::Stream s, int k_parts) {
  if (gate_up_w.dtype() == DType::kF8E4M3) {
    NANOVLLM_CHECK(x.dim(0) >= 1 && x.dim(0) <= kMoeDecodeMaxTokens, "moe_gate_up_decode (CUDA): ", x.dim(0),
                   " tokens; at most ", kMoeDecodeMaxTokens);
    moe_gate_up_fp8(act, x, gate_up_w, gate_up_scale, g, s, k_parts);
    return;
  }
  NANOVLLM_CHECK(!gate_up_scale.defined(), "moe_gate_up_decode (CUDA): block scales go with F8E4M3 weights only");
  const int64_t T = x.dim(0), H = x.dim(1), P = act.dim(0), E = gate_up_w.dim(0), Im = gate_up_w.dim(1) / 2;
  NANOVLLM_CHECK(T >= 1 && T <= kMoeDecodeMaxTokens, "moe_gate_up_decode (CUDA): ", T, " tokens; at most ",
                 kMoeDecodeMaxTokens);
  for (const TensorView* t : {&act, &x, &gate_up_w})
    NANOVLLM_CHECK(t->dtype() == DType::kBF16 && aligned16(t->data()),
                   "moe_gate_up_decode (CUDA): act, x and gate_up_w must be BF16 and 16-byte aligned, got ",
                   dtype_name(t->dtype()), " ", t->shape().str());
  NANOVLLM_CHECK(H % 8 == 0 && Im % 8 == 0, "moe_gate_up_decode (CUDA): the hidden size ", H,
                 " and the experts' intermediate size ", Im, " must be multiples of 8");
  const int slots = static_cast<int>(std::min(E, P));
  const GateUpArgs a{x.data_as<const __nv_bfloat16>(), gate_up_w.data_as<const __nv_bfloat16>(),
                     act.data_as<__nv_bfloat16>(), g.expert_offsets.data_as<const int32_t>(),
                     g.sorted_pairs.data_as<const int32_t>(), g.active_experts.data_as<const int32_t>(),
                     static_cast<int>(H), static_cast<int>(Im), static_cast<int>(P / T), slots};
  NANOVLLM_CHECK(k_parts == 0 || k_parts == 2 || k_parts == 4 || k_parts == 8,
                 "moe_gate_up_decode (CUDA): k_parts must be 0 (pick), 2, 4 or 8, got ", k_parts);
  // The pick: 2 parts, doubled (up to 8) while the grid leaves SMs without a CTA — a tensor-parallel rank's share of
  // Im. H200, 30B-A3B at bs = 1 (s40 calls.log#call5-moe_ab, same call): TP 1 keeps 2 parts (4 parts, faster alone
  // in MoeDecodeBench.DISABLED_GateUpKParts, made the whole step 2.99 -> 3.06 ms); TP 2 takes 4 (2.90 -> 2.84 ms).
  if (k_parts == 0) {
    k_parts = 2;
    while (k_parts < 8 && gate_up_ctas(slots, Im, k_parts) < static_cast<unsigned>(context_of(s).sm_count()))
      k_parts *= 2;
  }
  if (k_parts == 2) launch_gate_up_decode<2>(a, T, s);
  else if (k_parts == 4) launch_gate_up_decode<4>(a, T, s);
  else launch_gate_up_decode<8>(a, T, s);
}

void moe_down_combine(TensorView out, TensorView act, TensorView down_w, TensorView down_scale,
                      TensorView topk_weights, const ops::MoeGroups& g, ops::Stream s) {
  const int64_t T = out.dim(0), H = out.dim(1), k = topk_weights.dim(1), P = T * k, E = down_w.dim(0);
  const int64_t Im = down_w.dim(2);
  NANOVLLM_CHECK(T >= 1 && T <= kMoeDecodeMaxTokens && P <= kMoeDecodeMaxPairs, "moe_down_combine (CUDA): ", T,
                 " tokens x ", k, " experts; at most ", kMoeDecodeMaxTokens, " tokens and ", kMoeDecodeMaxPairs,
                 " pairs");
  if (down_w.dtype() == DType::kF8E4M3) {
    moe_down_combine_fp8(out, act, down_w, down_scale, topk_weights, g, s);
    return;
  }
  NANOVLLM_CHECK(!down_scale.defined(), "moe_down_combine (CUDA): block scales go with F8E4M3 weights only");
  for (const TensorView* t : {&out, &act, &down_w})
    NANOVLLM_CHECK(t->dtype() == DType::kBF16 && aligned16(t->data()),
                   "moe_down_combine (CUDA): out, act and down_w must be BF16 and 16-byte aligned, got ",
                   dtype_name(t->dtype()), " ", t->shape().str());
  NANOVLLM_CHECK(Im % 8 == 0, "moe_down_combine (CUDA): the experts' intermediate size ", Im,
                 " must be a multiple of 8");
  const DownCombineArgs a{act.data_as<const __nv_bfloat16>(), down_w.data_as<const __nv_bfloat16>(),
                          out.data_as<__nv_bfloat16>(), topk_weights.data_as<const float>(),
                          g.expert_offsets.data_as<const int32_t>(), g.sorted_pairs.data_as<const int32_t>(),
                          g.active_experts.data_as<const int32_t>(), static_cast<int>(Im), static_cast<int>(H),
                          static_cast<int>(T), static_cast<int>(k), static_cast<int>(std::min(E, P))};
  const size_t smem = static_cast<size_t>(P) * kDcCols * sizeof(__nv_bfloat16);
  const dim3 grid(ceil_div_u(H, kDcCols)), block(gemv_detail::kThreads);
  if (T <= 8) launch_pdl(moe_down_combine_kernel<1>, grid, block, smem, s, a);
  else if (T <= 16) launch_pdl(moe_down_combine_kernel<2>, grid, block, smem, s, a);
  else launch_pdl(moe_down_combine_kernel<4>, grid, block, smem, s, a);
}

}  // namespace nanovllm::cuda_ops
