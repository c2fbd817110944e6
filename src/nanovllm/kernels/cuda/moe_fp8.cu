// The fp8 experts' weight-streaming kernels of the decode path (moe_fp8.h): gate / up, and down + combine. At bs = 1
// the 8 chosen experts are most of a step's bytes; these read their e4m3 codes, one byte a weight (the bf16 kernels'
// half). (moe_experts' steps of up to kMoeGemvMaxTokens tokens take moe_experts.cu's tensor-core kernel instead,
// which shares an expert's weights between its tokens: H200, 30B-A3B shape, one layer, T = 4 71 vs 108 us here;
// at T = 1 this path's 28 us beat its 34.)
//
// The data path is fp8_gemv.cu's register-fed one: a warp streams kRows weight rows together, each lane loading
// 16 codes (one 16-byte vector) of every row per step, 512 columns a warp step; the codes become exact f32 values
// with integer ops (fp8_gemv_device.cuh), each lane sums its 16 products per token in fp32, multiplies the sum by
// the block's scale (16 | 128: a lane's codes lie in one 128-column block) and adds it to its accumulator; a warp
// sum then K parts in order (deterministic). The values are the reference's (the dequantized weights) up to fp32
// summation order. Tokens: an expert's rows (at most T) in chunks of kT, the weights reread per chunk (from L2).
//
//   * moe_gate_up_fp8_kernel: a warp item per (active expert slot, kGuCols activation columns, part of K): its
//     kRows rows are the kGuCols gate rows and the matching up rows, so one warp ends with both halves of its
//     columns; kParts warps (1, 2 or 4) split an item's K steps and add through shared memory in part order. A
//     CTA's items share one slot (Im / kGuCols is a multiple of 32), so its barriers are uniform and an inactive
//     slot's CTA exits at once. Epilogue as moe_gemv's: gate and up rounded to bf16, silu(gate) * up to bf16.
//   * moe_down_fp8_kernel: a CTA per kRows output columns (one 128-row block of every expert's down weight); warp
//     w takes the active slots w, w + 8, ... (at bs = 1 one expert each) and streams its kRows rows over all of K.
//     Each expert row is rounded to bf16 (the value moe_experts stores) and kept in shared memory for
//     moe_down_combine's fp32 slot-order combine.
// Both PDL-launched (pdl.cuh): the weights they read depend on the routing, so they wait at once. Launch shapes
// depend on T, E, k and the sizes only, never on the routing (CUDA graphs replay them).
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_gemv_device.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/moe_fp8.h"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cuda_ops {
namespace {

using namespace fp8_gemv_detail;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLaneCodes = 16;                 // codes a lane loads per row and step: one 16-byte vector
constexpr int kStepCols = 32 * kLaneCodes;     // columns per warp step
constexpr int kRows = 8;                       // weight rows a warp streams together
constexpr int kBlock = static_cast<int>(kFp8BlockSize);

// One warp's pass over K steps [s0, s1) of kRows weight rows against kT activation rows: acc[r][t] += the
// lane's share of row r . x[t]. w[r]: row r's codes (K of them); scale[h]: the scale row (one f32 per 128 columns)
// of rows [4 h, 4 h + 4); x[t]: an activation row, K bf16. Lanes past K (K % 512 != 0) load nothing (the guard is
// inside the weight load's asm: see ld_weight_if) and add nothing. The next
// step's codes load while this step's products run (two register buffers).
template <int kT>
__device__ __forceinline__ void stream_rows(const uint8_t* const (&w)[kRows], const float* const (&scale)[2],
                                            const uint16_t* const (&x)[kT], int K, int lane, int s0, int s1,
                                            float (&acc)[kRows][kT]) {
  auto load = [&](int s, uint4(&c)[kRows]) {
    const int k = s * kStepCols + lane * kLaneCodes;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      c[r] = gemv_detail::ld_weight_if(reinterpret_cast<const uint4*>(w[r] + k), k < K);  // never past a row
  };
  uint4 cur[kRows], nxt[kRows] = {};
  if (s0 < s1) load(s0, cur);
  for (int s = s0; s < s1; ++s) {
    if (s + 1 < s1) load(s + 1, nxt);
    const int k = s * kStepCols + lane * kLaneCodes;
    // __ldg is an asm without side effects too: its addresses stay inside the rows (kx = k where k < K) should a
    // compiler move the loads above the guard.
    const int kx = min(k, K - kLaneCodes);
    if (k < K) {
      float xs[kT][16];
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const uint4* row = reinterpret_cast<const uint4*>(x[t] + kx);
        bf16x8_as_f32(__ldg(row), xs[t]);
        bf16x8_as_f32(__ldg(row + 1), xs[t] + 8);
      }
      const float lo = __ldg(scale[0] + kx / kBlock), hi = __ldg(scale[1] + kx / kBlock);
#pragma unroll
      for (int r = 0; r < kRows; ++r) fp8x16_dot_add<kT>(cur[r], xs, r < kRows / 2 ? lo : hi, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) cur[r] = nxt[r];
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kT; ++t) acc[r][t] = warp_sum(acc[r][t]);
}

// acc[r][t] of the lane with index r * kT + t (a constant index per unrolled pair: the array stays in registers).
template <int kT>
__device__ __forceinline__ float pick(const float (&acc)[kRows][kT], int r_of_lane, int t_of_lane) {
  float v = 0.f;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kT; ++t)
      if (r == r_of_lane && t == t_of_lane) v = acc[r][t];
  return v;
}

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// ---- gate / up ------------------------------------------------------------------------------------------
constexpr int kGuCols = kRows / 2;  // activation columns of a warp item: its 4 gate rows and 4 up rows

struct GateUpArgs {
  const uint16_t* x;       // [T, H] bf16
  const uint8_t* w;        // [E, 2 Im, H] e4m3
  const float* scale;      // [E, 2 Im / 128, H / 128]
  __nv_bfloat16* act;      // [P, Im]
  const int32_t* offsets;  // [E + 1]
  const int32_t* sorted;   // [P]
  const int32_t* active;   // [E]
  int K, N, k, slots;      // K = H, N = Im, slots = min(E, P)
};

template <int kT, int kParts>
__global__ void __launch_bounds__(kThreads) moe_gate_up_fp8_kernel(GateUpArgs a) {
  static_assert(kGuCols * kT <= 32, "one lane per (column, token) output");
  constexpr int kItems = kWarps / kParts;
  __shared__ float red[kItems][kParts][2 * kGuCols][kT];  // each part's sums, for kParts > 1
  pdl_wait();
  pdl_trigger();
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int part = warp % kParts, local = warp / kParts;
  const int tiles = a.N / kGuCols;  // items per slot, a multiple of kItems: the CTA's items share its slot
  const int item = static_cast<int>(blockIdx.x) * kItems + local, slot = item / tiles;
  const int e = slot < a.slots ? a.active[slot] : -1;
  if (e < 0) return;  // the whole CTA: fewer experts have rows than the grid has slots
  const int r0 = a.offsets[e], n = a.offsets[e + 1] - r0;
  const int c = (item % tiles) * kGuCols;  // the item's first activation column
  const int k_blocks = a.K / kBlock;
  const uint8_t* w[kRows];
#pragma unroll
  for (int r = 0; r < kGuCols; ++r) {
    w[r] = a.w + (int64_t{e} * 2 * a.N + c + r) * a.K;                     // gate rows
    w[kGuCols + r] = a.w + (int64_t{e} * 2 * a.N + a.N + c + r) * a.K;     // the matching up rows
  }
  const int64_t scale_rows = 2 * a.N / kBlock;  // per expert
  const float* const scale[2] = {a.scale + (int64_t{e} * scale_rows + c / kBlock) * k_blocks,
                                 a.scale + (int64_t{e} * scale_rows + (a.N + c) / kBlock) * k_blocks};
  const int steps = (a.K + kStepCols - 1) / kStepCols;
  const int s0 = steps * part / kParts, s1 = steps * (part + 1) / kParts;
  const bool stores = lane < kGuCols * kT;        // one lane per output (column, token)
  const int col = stores ? lane / kT : 0, tok = stores ? lane % kT : 0;
  for (int t0 = 0; t0 < n; t0 += kT) {  // n is the CTA's slot's: the barriers below are uniform
    const uint16_t* x[kT];
#pragma unroll
    for (int t = 0; t < kT; ++t) x[t] = a.x + int64_t{a.sorted[r0 + min(t0 + t, n - 1)] / a.k} * a.K;
    float acc[kRows][kT] = {};
    stream_rows<kT>(w, scale, x, a.K, lane, s0, s1, acc);
    float gate = pick<kT>(acc, col, tok), up = pick<kT>(acc, kGuCols + col, tok);
    if constexpr (kParts > 1) {
      if (stores) {
        red[local][part][col][tok] = gate;
        red[local][part][kGuCols + col][tok] = up;
      }
      __syncthreads();
      gate = up = 0.f;
#pragma unroll
      for (int p = 0; p < kParts; ++p) {  // the parts in K order
        gate += red[local][p][col][tok];
        up += red[local][p][kGuCols + col][tok];
      }
      __syncthreads();  // red is rewritten by the next token chunk
    }
    if (part == 0 && stores && t0 + tok < n) {
      const float y = gemv_detail::silu(bf16_round(gate)) * bf16_round(up);
      a.act[int64_t{r0 + t0 + tok} * a.N + c + col] = __float2bfloat16_rn(y);
    }
  }
}

template <int kT>
void launch_gate_up(const GateUpArgs& a, int k_parts, ops::Stream s) {
  const int64_t items = int64_t{a.slots} * (a.N / kGuCols);
  const dim3 block(kThreads);
  if (k_parts == 1) launch_pdl(moe_gate_up_fp8_kernel<kT, 1>, dim3(ceil_div_u(items, kWarps)), block, 0, s, a);
  else if (k_parts == 2) launch_pdl(moe_gate_up_fp8_kernel<kT, 2>, dim3(ceil_div_u(items, kWarps / 2)), block, 0, s, a);
  else launch_pdl(moe_gate_up_fp8_kernel<kT, 4>, dim3(ceil_div_u(items, kWarps / 4)), block, 0, s, a);
}

// ---- down (+ combine) -----------------------------------------------------------------------------------
struct DownArgs {
  const uint16_t* act;     // [P, Im] bf16: row r of the grouping
  const uint8_t* w;        // [E, H, Im] e4m3
  const float* scale;      // [E, H / 128, Im / 128]
  __nv_bfloat16* out;      // [T, H]
  const float* weights;    // [T, k]
  const int32_t* offsets;  // [E + 1]
  const int32_t* sorted;   // [P]
  const int32_t* active;   // [E]
  int K, N, T, k, slots;   // K = Im, N = H, slots = min(E, P)
};

template <int kT>
__global__ void __launch_bounds__(kThreads) moe_down_fp8_kernel(DownArgs a) {
  static_assert(kRows * kT <= 32, "one lane per (row, token) output");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* vals = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [P][kRows], pair p's outputs
  pdl_wait();
  pdl_trigger();
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int c0 = static_cast<int>(blockIdx.x) * kRows;  // inside one 128-row block (kRows | 128)
  const int k_blocks = a.K / kBlock, steps = (a.K + kStepCols - 1) / kStepCols;
  const bool stores = lane < kRows * kT;  // one lane per output (row, token)
  const int row = stores ? lane / kT : 0, tok = stores ? lane % kT : 0;
  for (int slot = warp; slot < a.slots; slot += kWarps) {
    const int e = a.active[slot];
    if (e < 0) break;  // the active list ends with -1s
    const int r0 = a.offsets[e], n = a.offsets[e + 1] - r0;
    const uint8_t* w[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) w[r] = a.w + (int64_t{e} * a.N + c0 + r) * a.K;
    const float* sc = a.scale + (int64_t{e} * (a.N / kBlock) + c0 / kBlock) * k_blocks;
    const float* const scale[2] = {sc, sc};
    for (int t0 = 0; t0 < n; t0 += kT) {
      const uint16_t* x[kT];
#pragma unroll
      for (int t = 0; t < kT; ++t) x[t] = a.act + int64_t{r0 + min(t0 + t, n - 1)} * a.K;
      float acc[kRows][kT] = {};
      stream_rows<kT>(w, scale, x, a.K, lane, 0, steps, acc);
      const float v = pick<kT>(acc, row, tok);
      if (stores && t0 + tok < n) vals[a.sorted[r0 + t0 + tok] * kRows + row] = __float2bfloat16_rn(v);
    }
  }
  __syncthreads();
  // moe_combine's fp32 sum in slot order over the bf16 expert outputs.
  for (int o = static_cast<int>(threadIdx.x); o < a.T * kRows; o += kThreads) {
    const int t = o / kRows, c = o % kRows;
    float y = 0.f;
    for (int j = 0; j < a.k; ++j) y += a.weights[t * a.k + j] * __bfloat162float(vals[(t * a.k + j) * kRows + c]);
    a.out[int64_t{t} * a.N + c0 + c] = __float2bfloat16_rn(y);
  }
}

void launch_down(const DownArgs& a, int64_t tokens, size_t smem, ops::Stream s) {
  const dim3 grid(ceil_div_u(a.N, kRows)), block(kThreads);
  if (tokens == 1) launch_pdl(moe_down_fp8_kernel<1>, grid, block, smem, s, a);
  else if (tokens == 2) launch_pdl(moe_down_fp8_kernel<2>, grid, block, smem, s, a);
  else launch_pdl(moe_down_fp8_kernel<4>, grid, block, smem, s, a);
}

// What the kernels rely on: BF16 16-byte aligned activations, F8E4M3 weights [E, R, C] with F32 scales
// [E, R / 128, C / 128], R and C multiples of 128.
void check_fp8_expert(const char* op, const TensorView& w, const TensorView& scale) {
  NANOVLLM_CHECK(w.dtype() == DType::kF8E4M3 && w.ndim() == 3 && aligned16(w.data()), op,
                 ": the expert weights must be F8E4M3 [E, rows, cols], 16-byte aligned, got ", dtype_name(w.dtype()),
                 " ", w.shape().str());
  NANOVLLM_CHECK(w.dim(1) % kBlock == 0 && w.dim(2) % kBlock == 0, op, ": fp8 expert weights ", w.shape().str(),
                 " must hold whole 128 x 128 blocks");
  const Shape want{w.dim(0), w.dim(1) / kBlock, w.dim(2) / kBlock};
  NANOVLLM_CHECK(scale.defined() && scale.dtype() == DType::kF32 && scale.shape() == want, op,
                 ": the block scales of fp8 expert weights ", w.shape().str(), " must be F32 ", want.str());
}

void check_bf16(const char* op, std::initializer_list<const TensorView*> ts) {
  for (const TensorView* t : ts)
    NANOVLLM_CHECK(t->dtype() == DType::kBF16 && aligned16(t->data()), op,
                   ": activations must be BF16 and 16-byte aligned, got ", dtype_name(t->dtype()), " ",
                   t->shape().str());
}

DownArgs down_args(TensorView out, TensorView act, TensorView down_w, TensorView down_scale, const float* weights,
                   const ops::MoeGroups& g, int64_t T, int64_t k, int64_t P) {
  return {act.data_as<const uint16_t>(), down_w.data_as<const uint8_t>(), down_scale.data_as<const float>(),
          out.data_as<__nv_bfloat16>(), weights, g.expert_offsets.data_as<const int32_t>(),
          g.sorted_pairs.data_as<const int32_t>(), g.active_experts.data_as<const int32_t>(),
          static_cast<int>(down_w.dim(2)), static_cast<int>(down_w.dim(1)), static_cast<int>(T), static_cast<int>(k),
          static_cast<int>(std::min(down_w.dim(0), P))};
}

}  // namespace

void moe_gate_up_fp8(TensorView act, TensorView x, TensorView gate_up_w, TensorView gate_up_scale,
                     const ops::MoeGroups& g, ops::Stream s, int k_parts) {
  constexpr const char* op = "moe_gate_up_fp8 (CUDA)";
  const int64_t T = x.dim(0), H = x.dim(1), P = act.dim(0), E = gate_up_w.dim(0), Im = gate_up_w.dim(1) / 2;
  NANOVLLM_CHECK(T >= 1 && T <= kMoeGemvMaxTokens, op, ": ", T, " tokens; 1 to ", kMoeGemvMaxTokens);
  check_bf16(op, {&act, &x});
  check_fp8_expert(op, gate_up_w, gate_up_scale);
  NANOVLLM_CHECK(gate_up_w.dim(2) == H && act.dim(1) == Im, op, ": x ", x.shape().str(), ", gate_up_w ",
                 gate_up_w.shape().str(), " and act ", act.shape().str(), " do not fit");
  // check_fp8_expert sees 2 Im rows: Im itself must be whole blocks (a warp item's 4 gate rows and their scale row,
  // and Im / 4 items per slot a multiple of a CTA's items, which keeps a CTA on one slot).
  NANOVLLM_CHECK(gate_up_w.dim(1) == 2 * Im && H % kBlock == 0 && Im % kBlock == 0, op, ": gate_up_w ",
                 gate_up_w.shape().str(), " must be [E, 2 Im, H] with H and Im multiples of ", kBlock);
  NANOVLLM_CHECK(P % T == 0 && P / T >= 1, op, ": act ", act.shape().str(), " must hold T k rows for ", T,
                 " tokens");
  NANOVLLM_CHECK(k_parts == 0 || k_parts == 1 || k_parts == 2 || k_parts == 4, op,
                 ": k_parts must be 0 (pick), 1, 2 or 4, got ", k_parts);
  const GateUpArgs a{x.data_as<const uint16_t>(), gate_up_w.data_as<const uint8_t>(),
                     gate_up_scale.data_as<const float>(), act.data_as<__nv_bfloat16>(),
                     g.expert_offsets.data_as<const int32_t>(), g.sorted_pairs.data_as<const int32_t>(),
                     g.active_experts.data_as<const int32_t>(), static_cast<int>(H), static_cast<int>(Im),
                     static_cast<int>(P / T), static_cast<int>(std::min(E, P))};
  // The pick (not measured yet): one warp per item, more sharing its K while the grid leaves SMs without a CTA
  // (the bf16 kernel's rule; an fp8 item's rows are half its bytes).
  if (k_parts == 0) {
    const int64_t items = int64_t{a.slots} * (Im / kGuCols);
    k_parts = 1;
    while (k_parts < 4 && items * k_parts / kWarps < context_of(s).sm_count()) k_parts *= 2;
  }
  if (T == 1) launch_gate_up<1>(a, k_parts, s);
  else if (T == 2) launch_gate_up<2>(a, k_parts, s);
  else launch_gate_up<4>(a, k_parts, s);
}

void moe_down_combine_fp8(TensorView out, TensorView act, TensorView down_w, TensorView down_scale,
                          TensorView topk_weights, const ops::MoeGroups& g, ops::Stream s) {
  constexpr const char* op = "moe_down_combine_fp8 (CUDA)";
  const int64_t T = out.dim(0), k = topk_weights.dim(1), P = T * k;
  NANOVLLM_CHECK(T >= 1 && T <= kMoeDecodeMaxTokens && P <= kMoeDecodeMaxPairs, op, ": ", T, " tokens x ", k,
                 " experts; at most ", kMoeDecodeMaxTokens, " tokens and ", kMoeDecodeMaxPairs, " pairs");
  check_bf16(op, {&out, &act});
  check_fp8_expert(op, down_w, down_scale);
  NANOVLLM_CHECK(topk_weights.dtype() == DType::kF32 && out.dim(1) == down_w.dim(1) && act.dim(0) == P &&
                     act.dim(1) == down_w.dim(2),
                 op, ": out ", out.shape().str(), ", act ", act.shape().str(), ", down_w ", down_w.shape().str(),
                 " and topk_weights ", topk_weights.shape().str(), " (F32) do not fit");
  const DownArgs a = down_args(out, act, down_w, down_scale, topk_weights.data_as<const float>(), g, T, k, P);
  launch_down(a, T, static_cast<size_t>(P) * kRows * sizeof(__nv_bfloat16), s);
}

}  // namespace nanovllm::cuda_ops
