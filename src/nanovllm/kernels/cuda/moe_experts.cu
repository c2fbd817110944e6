// The experts' SwiGLU MLPs over their grouped rows (kernels/moe_ops.h, moe_experts): two grouped GEMMs,
//   1. act[r]  = silu(gate) * up,  [gate | up] = W_gu[e] @ x[token of r]   (x rows gathered through the
//      permutation: row r holds pair sorted_pairs[r] of token sorted_pairs[r] / k; nothing is copied)
//   2. rows[r] = W_d[e] @ act[r]
// for every expert e and its rows r in [offsets[e], offsets[e + 1]). bf16 in and out, fp32 accumulation;
// gate and up are rounded to bf16 before the activation (what transformers' bf16 experts compute). Two kernel
// families, both launched with shapes that depend on T, E and the sizes only (CUDA graphs replay them whatever
// the routing), experts without rows cost nothing but an early exit:
//
//   * moe_gemv (decode-sized steps, T <= kMoeGemvMaxTokens): a CTA per (active expert, 16 output columns)
//     streams that expert's weight rows once for all of its rows (at most T: a token picks an expert once),
//     so a step reads only the chosen experts' weights — at bs = 1 the 8 of 128. gemv.cu's warp step
//     (gemv_device.cuh): W rows as the 16-row A operand of mma.sync m16n8k16, up to 16 rows (tokens) as the B
//     operand, each lane's 16-byte loads = 8 consecutive k. 8 warps = 2 row tiles x 4 K groups, the K groups
//     summed through shared memory in a fixed order. Stage 1's CTA holds 16 gate rows and the matching 16 up
//     rows, so its epilogue writes the activation.
//   * moe_gemm (prefill / large batches; on sm_90a moe_gemm_wgmma.cu's warpgroup-MMA version of it, this one
//     where the device or the binary is not sm_90a, or KernelOptions::moe_gemm_wgmma is off):
//     a tensor-core tile GEMM per (expert, 128-row tile, 128-column tile):
//     128 x 128 x 32 tiles, 8 warps of 64 x 32, mma.sync m16n8k16 fed by ldmatrix from a 4-stage cp.async ring
//     (rows padded to 80 bytes: conflict-free ldmatrix). A CTA finds its expert and row tile from the
//     offsets (a warp scan over the active experts' tile counts); the grid has ceil(P / 128) + min(E, P) row
//     tiles, an upper bound, and the surplus CTAs exit. Stage 1's B tile alternates 16 gate rows and the
//     matching 16 up rows, so each warp holds both halves of its 16 activation columns in registers.
// Both are PDL-launched (pdl.cuh): the weights they read depend on the routing, so they wait for their
// predecessor first and then let their successor launch.
//
// fp8 experts (block-scaled e4m3, docs/fp8.md; H and Im multiples of 128): steps of up to kMoeGemvMaxTokens tokens
// run moe_gemv with kFp8: each lane's 16-byte load is 16 codes, made bf16 in registers and fed to the same mma.sync
// (fp8_mma_device.cuh), each 128-column block's sums joining the accumulators times its scale (H200,
// 30B-A3B shape, one layer: T = 4 71 us, T = 32 249; the FMA streaming kernels of moe_fp8.cu took 108 and 361, the
// bf16 experts 89 and 316). Longer steps run moe_gemm with kFp8, whose B tiles arrive as codes (a cp.async ring
// of 32-byte rows beside the bf16 one) and are converted by the thread that copied them, once its copy has landed,
// to bf16(code x scale) in the bf16 B tile: the values the loader's bf16 dequantization gives, so the GEMM is the
// bf16 GEMM on the dequantized experts, bit for bit. A 32-column k tile lies in one 128-column block, and a B tile's
// rows in one 128-row block per half (stage 1: its 64 gate rows and 64 up rows; stage 2: 128 rows), so each
// thread's chunk has one scale.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/fp8_mma_device.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/moe_grouped.cuh"
#include "nanovllm/kernels/cuda/mma_utils.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"

namespace nanovllm::cuda_ops {
namespace {

using namespace moe_grouped;

// ---- moe_gemv -------------------------------------------------------------------------------------------
namespace gv {
using namespace gemv_detail;
constexpr int kRowTiles = 2;                   // 16-row tiles per CTA
constexpr int kKGroups = kWarps / kRowTiles;   // K groups per CTA
constexpr int kCols = 16;                      // output columns per CTA (stage 1: gate / up row pairs)

template <bool kGateUp, int kNT, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) moe_gemv_kernel(GroupedArgs g) {
  __shared__ float red[kKGroups][kRowTiles][16][16];  // [K group][row tile][row][token]
  pdl_wait();
  pdl_trigger();
  const int e = g.active[blockIdx.x];
  if (e < 0) return;  // fewer experts have rows than the grid has slots
  const int r0 = g.offsets[e], n = g.offsets[e + 1] - r0;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int rt = warp % kRowTiles, kg = warp / kRowTiles, gq = lane >> 2, q = lane & 3;
  const int Kv = g.K / 8;
  // This warp's 16 weight rows: stage 1 tile 0 = gate rows [c0, c0 + 16), tile 1 = the matching up rows;
  // stage 2 rows [32 blockIdx.y + 16 rt, + 16). Rows past the end reread the last one (never stored).
  const int c0 = static_cast<int>(blockIdx.y) * (kGateUp ? kCols : kCols * kRowTiles);
  const int tile_row = kGateUp ? c0 : c0 + 16 * rt;
  const int last = g.N - 1;
  const int w_rows = kGateUp ? 2 * g.N : g.N;
  auto w_row = [&](int j) {
    const int jj = min(tile_row + j, last);
    const int row = kGateUp && rt == 1 ? g.N + jj : jj;
    const int64_t at = (int64_t{e} * w_rows + row) * g.K;
    if constexpr (kFp8) return reinterpret_cast<const uint4*>(g.w8 + at);
    else return reinterpret_cast<const uint4*>(g.w + at);
  };
  const uint4* w_lo = w_row(gq);
  const uint4* w_hi = w_row(gq + 8);
  // fp8: the tile's 16 rows lie in one 128-row block (tile_row and N are multiples of 16 and 128).
  const int k_blocks = g.K / 128;
  const float* scale = nullptr;
  if constexpr (kFp8)
    scale = g.w_scale + (int64_t{e} * (w_rows / 128) + (kGateUp && rt == 1 ? g.N + tile_row : tile_row) / 128) *
                            k_blocks;
  const int steps = kFp8 ? (k_blocks + 1) / 2 : (Kv + kStepVecs - 1) / kStepVecs;
  const int s0 = steps * kg / kKGroups, s1 = steps * (kg + 1) / kKGroups;
  auto load = [&](int s, uint4(&lo)[kU], uint4(&hi)[kU]) {
    if constexpr (kFp8) fp8_mma_detail::load_codes_step(w_lo, w_hi, s, g.K / 16, q, lo, hi);
    else load_w_step(w_lo, w_hi, s * kStepVecs, Kv, q, lo, hi);
  };

  for (int t0 = 0; t0 < n; t0 += 8 * kNT) {
    const int nt_rows = min(8 * kNT, n - t0);
    const uint4* xr[kNT];
    float acc[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      xr[nt] = reinterpret_cast<const uint4*>(a_row<kGateUp>(g, r0 + t0 + min(gq + 8 * nt, nt_rows - 1)));
      acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    }
    auto products = [&](const uint4(&lo)[kU], const uint4(&hi)[kU], int s) {
      if constexpr (kFp8) fp8_mma_detail::mma_step<kNT>(acc, lo, hi, xr, s, k_blocks, q, scale);
      else mma_step<kNT, kXGlobal>(acc, lo, hi, xr, s * kStepVecs, Kv, q, Kv);
    };
    uint4 lo0[kU], hi0[kU], lo1[kU], hi1[kU];
    if (s0 < s1) load(s0, lo0, hi0);
    for (int s = s0; s < s1; s += 2) {  // two register buffers: the next step's loads fly during the products
      if (s + 1 < s1) load(s + 1, lo1, hi1);
      products(lo0, hi0, s);
      if (s + 1 >= s1) break;
      if (s + 2 < s1) load(s + 2, lo0, hi0);
      products(lo1, hi1, s + 1);
    }
    // The K groups' partial sums, summed in group order by one thread per output.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[kg][rt][gq + 8 * (i >> 1)][8 * nt + 2 * q + (i & 1)] = acc[nt][i];
    __syncthreads();
    for (int o = static_cast<int>(threadIdx.x); o < (kGateUp ? 1 : kRowTiles) * 16 * 8 * kNT; o += kThreads) {
      const int tok = o % (8 * kNT), row = o / (8 * kNT);  // row: 16 rt + row within the tile
      if (tok >= nt_rows) continue;
      float v[kRowTiles] = {};
      for (int t = 0; t < (kGateUp ? kRowTiles : 1); ++t) {
        const int tr = kGateUp ? t : row / 16;
        for (int kk = 0; kk < kKGroups; ++kk) v[t] += red[kk][tr][row % 16][tok];
      }
      const int col = c0 + row;
      if (col >= g.N) continue;
      const float y = kGateUp ? silu(bf16_round(v[0])) * bf16_round(v[1]) : v[0];
      g.out[int64_t{r0 + t0 + tok} * g.N + col] = __float2bfloat16_rn(y);
    }
    __syncthreads();  // red is rewritten by the next token chunk
  }
}
}  // namespace gv

// ---- moe_gemm -------------------------------------------------------------------------------------------
namespace gm {
constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;
constexpr int kPitch = kBK + 8;  // bf16 per smem row: 80 bytes, conflict-free ldmatrix
constexpr int kTileElems = kBM * kPitch;
constexpr size_t kSmem = size_t{kStages} * 2 * kTileElems * sizeof(__nv_bfloat16);
constexpr size_t kCodeTile = size_t{kBN} * kBK;  // fp8: one B tile's codes, 32 bytes a row
constexpr size_t kSmemFp8 = kSmem + kStages * kCodeTile;

template <bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) moe_gemm_kernel(GroupedArgs g) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sA = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kStages][kBM][kPitch]
  __nv_bfloat16* sB = sA + kStages * kTileElems;                   // [kStages][kBN][kPitch]
  uint8_t* sC = reinterpret_cast<uint8_t*>(sB + kStages * kTileElems);  // kFp8: [kStages][kBN][kBK] codes
  __shared__ int s_expert, s_m0;
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  pdl_wait();
  pdl_trigger();

  if (warp == 0) find_row_tile(g, kBM, lane, s_expert, s_m0);
  __syncthreads();
  const int e = s_expert;
  if (e < 0) return;
  const int r_begin = g.offsets[e] + s_m0, r_count = min(kBM, g.offsets[e + 1] - r_begin);
  const int n0 = static_cast<int>(blockIdx.y) * (kGateUp ? kBN / 2 : kBN);  // first output column
  const int64_t w_rows = kGateUp ? 2 * g.N : g.N;

  // Each thread copies two 16-byte chunks of A and two of B per stage: rows tid / 4 and tid / 4 + 64, k chunk tid % 4.
  // fp8: one 16-byte chunk of B's codes instead, row tid / 2, k half tid % 2, which it converts to bf16 itself.
  const int kc = tid & 3;
  const __nv_bfloat16* a_src[2];
  const __nv_bfloat16* b_src[2] = {};
  bool a_ok[2], b_ok[2] = {};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = tid / 4 + 64 * i;
    a_ok[i] = row < r_count;
    a_src[i] = a_ok[i] ? a_row<kGateUp>(g, r_begin + row) : g.a;
    if constexpr (!kFp8) b_src[i] = g.w + (int64_t{e} * w_rows + b_weight_row<kGateUp>(g, n0, row, b_ok[i])) * g.K;
  }
  const int c_row = tid / 2, c_half = tid & 1;  // fp8: this thread's B codes chunk
  bool c_ok = false;
  const uint8_t* c_src = nullptr;
  const float* c_scale = nullptr;  // the chunk's weight row's scales, one per 128 columns
  if constexpr (kFp8) {
    const int64_t wrow = int64_t{e} * w_rows + b_weight_row<kGateUp>(g, n0, c_row, c_ok);
    c_src = g.w8 + wrow * g.K + 16 * c_half;
    c_scale = g.w_scale + (wrow / 128) * (g.K / 128);
  }
  const int k_tiles = (g.K + kBK - 1) / kBK;
  auto load_stage = [&](int stage, int kt) {
    const int k = kt * kBK + kc * 8;
    const bool k_ok = k < g.K;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = tid / 4 + 64 * i;
      cp_async16_zfill(smem_u32(sA + stage * kTileElems + row * kPitch + kc * 8), a_src[i] + (k_ok ? k : 0),
                       a_ok[i] && k_ok);
      if constexpr (!kFp8)
        cp_async16_zfill(smem_u32(sB + stage * kTileElems + row * kPitch + kc * 8), b_src[i] + (k_ok ? k : 0),
                         b_ok[i] && k_ok);
    }
    if constexpr (kFp8) {  // K is a multiple of 128: every chunk of a k tile exists
      cp_async16_zfill(smem_u32(sC + stage * kCodeTile + c_row * kBK + 16 * c_half), c_src + (c_ok ? kt * kBK : 0),
                       c_ok);
    }
  };
  // fp8: this thread's landed codes of stage `stage` (k tile kt) as bf16(code x scale) into the bf16 B tile.
  auto convert_stage = [&](int stage, int kt) {
    // An asm load with a memory clobber: kept after cp_async_wait (itself an asm without one), which a plain load
    // of the landed codes need not be.
    uint4 codes;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(codes.x), "=r"(codes.y), "=r"(codes.z), "=r"(codes.w)
                 : "r"(smem_u32(sC + stage * kCodeTile + c_row * kBK + 16 * c_half))
                 : "memory");
    const float scale = c_ok ? __ldg(c_scale + kt * kBK / 128) : 0.f;
    uint4* dst = reinterpret_cast<uint4*>(sB + stage * kTileElems + c_row * kPitch + 16 * c_half);
    dequantize16(codes, scale, dst[0], dst[1]);
  };

  const int wm = warp / 4, wn = warp % 4;  // the warp's 64 x 32 block of the tile
  float acc[4][4][4] = {};                 // [m16 tile][n8 tile][fragment]
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    // fp8: B's bf16 stage kt was last read at k tile kt - kStages, before the previous barriers.
    if constexpr (kFp8) convert_stage(kt % kStages, kt);
    __syncthreads();  // stage kt has landed (and is converted) for every thread; stage kt - 1 is no longer read
    if (kt + kStages - 1 < k_tiles) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();
    const __nv_bfloat16* a_tile = sA + (kt % kStages) * kTileElems;
    const __nv_bfloat16* b_tile = sB + (kt % kStages) * kTileElems;
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
        ldsm_x4(smem_u32(a_tile + (wm * 64 + mt * 16 + (lane & 15)) * kPitch + ks + (lane >> 4) * 8), af[mt][0],
                af[mt][1], af[mt][2], af[mt][3]);
#pragma unroll
      for (int np = 0; np < 2; ++np)
        ldsm_x4(smem_u32(b_tile + (wn * 32 + np * 16) * kPitch + ldsm_b_offset(lane, kPitch) + ks), bf[2 * np][0],
                bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma16816(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue. Fragment element i of n8 tile nt, m16 tile mt: row gq + 8 (i / 2), column 2 tq + i % 2.
  const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wm * 64 + mt * 16 + gq + 8 * h;
      if (row >= r_count) continue;
      __nv_bfloat16* out = g.out + int64_t{r_begin + row} * g.N;
#pragma unroll
      for (int nt = 0; nt < (kGateUp ? 2 : 4); ++nt) {
        float y[2];
        int col;
        if constexpr (kGateUp) {  // tiles 0, 1: gate; 2, 3: the matching up rows
          col = n0 + wn * 16 + nt * 8 + 2 * tq;
#pragma unroll
          for (int c = 0; c < 2; ++c)
            y[c] = gemv_detail::silu(bf16_round(acc[mt][nt][2 * h + c])) * bf16_round(acc[mt][nt + 2][2 * h + c]);
        } else {
          col = n0 + wn * 32 + nt * 8 + 2 * tq;
          y[0] = acc[mt][nt][2 * h];
          y[1] = acc[mt][nt][2 * h + 1];
        }
        store_pair(out, col, g.N, y[0], y[1]);
      }
    }
}
}  // namespace gm

// One grouped GEMM stage over T tokens' P rows.
template <bool kGateUp, bool kFp8>
void grouped(const GroupedArgs& a, int64_t T, ops::Stream s) {
  const unsigned slots = static_cast<unsigned>(std::min<int64_t>(a.E, a.P));
  if (T <= kMoeGemvMaxTokens) {
    const unsigned col_blocks = ceil_div_u(a.N, kGateUp ? gv::kCols : gv::kCols * gv::kRowTiles);
    const dim3 grid(slots, col_blocks);
    // An expert has at most T rows (a token picks it once): at T <= 8 one 8-row B tile holds them.
    launch_pdl(T <= 8 ? gv::moe_gemv_kernel<kGateUp, 1, kFp8> : gv::moe_gemv_kernel<kGateUp, 2, kFp8>, grid,
               dim3(gv::kThreads), 0, s, a);
  } else {
    if (context_of(s).options.moe_gemm_wgmma && moe_gemm_wgmma(a, kGateUp, s)) return;  // sm_90a
    constexpr size_t smem = kFp8 ? gm::kSmemFp8 : gm::kSmem;
    static PerDeviceFlag smem_raised;
    once_per_current_device(smem_raised, [] {
      CUDA_CHECK(cudaFuncSetAttribute(gm::moe_gemm_kernel<kGateUp, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
    });
    const unsigned row_tiles = ceil_div_u(a.P, gm::kBM) + slots;  // each expert wastes at most one partial tile
    const dim3 grid(row_tiles, ceil_div_u(a.N, kGateUp ? gm::kBN / 2 : gm::kBN));
    launch_pdl(gm::moe_gemm_kernel<kGateUp, kFp8>, grid, dim3(gm::kThreads), smem, s, a);
  }
}

}  // namespace

void moe_experts(TensorView rows, TensorView x, const ops::MoeExpertWeights& w, const ops::MoeGroups& g,
                 TensorView act, ops::Stream s) {
  const TensorView &gate_up_w = w.gate_up, &down_w = w.down;
  const bool fp8 = w.fp8();
  for (const TensorView* t : {&rows, &x, &act})
    NANOVLLM_CHECK(t->dtype() == DType::kBF16, "moe_experts (CUDA): the activations must be BF16, got ",
                   dtype_name(t->dtype()), " ", t->shape().str());
  for (const TensorView* t : {&gate_up_w, &down_w})
    NANOVLLM_CHECK(t->dtype() == (fp8 ? DType::kF8E4M3 : DType::kBF16),
                   "moe_experts (CUDA): the expert weights must be BF16 or fp8 (F8E4M3 with block scales), got ",
                   dtype_name(t->dtype()), " ", t->shape().str());
  const int64_t T = x.dim(0), H = x.dim(1), P = rows.dim(0), E = gate_up_w.dim(0), Im = down_w.dim(2);
  NANOVLLM_CHECK(H % 8 == 0 && Im % 8 == 0, "moe_experts (CUDA): the hidden size ", H, " and the experts' ",
                 "intermediate size ", Im, " must be multiples of 8 (16-byte rows)");
  for (const TensorView* t : std::initializer_list<const TensorView*>{&rows, &x, &gate_up_w, &down_w, &act})
    NANOVLLM_CHECK(aligned16(t->data()), "moe_experts (CUDA): tensors must be 16-byte aligned");
  const int k = static_cast<int>(P / T);
  const auto* offsets = g.expert_offsets.data_as<const int32_t>();
  const auto* sorted = g.sorted_pairs.data_as<const int32_t>();
  const auto* active = g.active_experts.data_as<const int32_t>();
  const auto* xb = x.data_as<const __nv_bfloat16>();
  auto* ab = act.data_as<__nv_bfloat16>();
  const GroupedArgs stage1{xb, fp8 ? nullptr : gate_up_w.data_as<const __nv_bfloat16>(),
                           fp8 ? gate_up_w.data_as<const uint8_t>() : nullptr,
                           fp8 ? w.gate_up_scale.data_as<const float>() : nullptr, ab, offsets, sorted, active,
                           static_cast<int>(H), static_cast<int>(Im), static_cast<int>(P), static_cast<int>(E), k};
  const GroupedArgs stage2{ab, fp8 ? nullptr : down_w.data_as<const __nv_bfloat16>(),
                           fp8 ? down_w.data_as<const uint8_t>() : nullptr,
                           fp8 ? w.down_scale.data_as<const float>() : nullptr, rows.data_as<__nv_bfloat16>(), offsets,
                           sorted, active, static_cast<int>(Im), static_cast<int>(H), static_cast<int>(P),
                           static_cast<int>(E), k};
  if (fp8) {
    grouped<true, true>(stage1, T, s);
    grouped<false, true>(stage2, T, s);
  } else {
    grouped<true, false>(stage1, T, s);
    grouped<false, false>(stage2, T, s);
  }
}

}  // namespace nanovllm::cuda_ops
