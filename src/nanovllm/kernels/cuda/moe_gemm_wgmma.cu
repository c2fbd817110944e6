// The experts' grouped GEMM for long steps on Hopper (sm_90a): moe_experts.cu's tiled GEMM (same grid, same
// (expert, row tile) per CTA, same gather of x rows through the permutation, same epilogues) with warpgroup MMAs.
//
// CTA = 2 warpgroups (256 threads), a 128 x 128 output tile: rows = 128 expert rows (warpgroup w owns rows
// [64 w, 64 w + 64)), columns = 128 weight rows (stage 1: 4 groups of 16 gate rows then the matching 16 up
// rows, so a thread holds both halves of its columns; stage 2: 128 output columns). K in tiles of 64 (one
// 128-byte row): per tile and warpgroup 4 x wgmma m64n128k16, A (x rows) and B (weight rows) both K-major from
// shared memory in the 128-byte-swizzle layout (wgmma.cuh: 16-byte chunk c of row r at chunk c ^ (r % 8)).
// Pipeline: a 3-stage ring of (A, B) tiles filled by all 256 threads with 16-byte cp.async (zero-filled past the
// expert's rows, past N and past K); tile kt + 2 is requested while tile kt is multiplied; the wgmmas of a tile are
// waited for before the next barrier, which is what lets that barrier's loads overwrite the stage. Before that
// barrier each thread fences its landed copies to the async proxy, through which wgmma reads shared memory (without
// the fence the fp8 kernel's dequantized tiles were read stale, differently run to run). 97 KB of shared memory and
// 112-114 registers: two CTAs an SM, so one's barriers and epilogue overlap the other's MMAs. H200, 30B-A3B shape,
// T = 8192 (MoeGemmBench.DISABLED_TiledRate): 420 TFLOP/s, the mma.sync kernel 234; 4 stages at one CTA an SM 338.
// Accumulators: the mma.sync C layout per warp (mma_utils.cuh), so the epilogue is the mma.sync kernel's: gate and
// up rounded to bf16, silu(gate) * up, bf16 stores.
//
// fp8 experts (kFp8): B arrives as codes (a 3-stage ring of 64-byte rows beside A's); at the top of tile kt each
// thread rewrites the two code chunks it copied as bf16(code x scale) (dequantize16: the loader's values) into one
// of two bf16 B tiles in the swizzled layout. A 64-column k tile lies in one 128-column scale block. 2 x 105 KB and
// 128 registers (no spills): still two CTAs an SM. T = 8192: 305 TFLOP/s, the mma.sync kernel 208.
//
// Built for sm_90a; elsewhere the kernel is a trap and moe_gemm_wgmma() answers false (runs_sm90a_code).
#include <cstdint>

#include <cuda_bf16.h>

#include "nanovllm/kernels/cuda/bulk_copy.cuh"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/mma_utils.cuh"
#include "nanovllm/kernels/cuda/moe_grouped.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"
#include "nanovllm/kernels/cuda/wgmma.cuh"

namespace nanovllm::cuda_ops::moe_grouped {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64, kThreads = 256, kStages = 3;
constexpr unsigned kTileBytes = 128 * kBK * 2;  // 128 rows x 128 bytes: one A or one bf16 B tile
constexpr unsigned kCodeBytes = 128 * kBK;      // fp8: one B tile's codes, 64 bytes a row

// Shared memory: [kStages][A tile, B tile] (bf16) or [kStages][A tile] + [2][B tile] + [kStages][codes] (fp8),
// + slack to align the tiles to 1024 bytes (swizzle atoms).
template <bool kFp8>
constexpr size_t smem_bytes() {
  return kFp8 ? size_t{kStages + 2} * kTileBytes + kStages * kCodeBytes + 1024
              : size_t{2 * kStages} * kTileBytes + 1024;
}

#ifdef NANOVLLM_WGMMA_DEVICE
// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled tile.
__device__ __forceinline__ unsigned swizzled(int r, int c) {
  return static_cast<unsigned>(r * 128 + ((c ^ (r & 7)) << 4));
}
#endif

template <bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) moe_gemm_wgmma_kernel(GroupedArgs g) {
#ifdef NANOVLLM_WGMMA_DEVICE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  // bf16: stage s's A tile at base + 2 s kTileBytes, its B tile right after. fp8: A tiles at base + s kTileBytes,
  // the two bf16 B tiles after them, then the code tiles.
  auto a_tile = [&](int s) { return base + static_cast<unsigned>(s) * (kFp8 ? 1 : 2) * kTileBytes; };
  auto b_tile = [&](int s) {  // fp8: s = the bf16 tile (k tile parity)
    return kFp8 ? base + static_cast<unsigned>(kStages + s) * kTileBytes : a_tile(s) + kTileBytes;
  };
  auto code_tile = [&](int s) { return base + (kStages + 2) * kTileBytes + static_cast<unsigned>(s) * kCodeBytes; };
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

  // This thread's copies per stage: 16-byte chunk tid % 8 of rows tid / 8 + 32 i (i < 4) of the A tile and, bf16,
  // of the B tile; fp8: code chunk tid % 4 (16 codes) of B rows tid / 4 + 64 i (i < 2).
  const int chunk = tid & 7;
  const __nv_bfloat16* a_src[4];
  const __nv_bfloat16* b_src[4] = {};
  bool a_ok[4], b_ok[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = tid / 8 + 32 * i;
    a_ok[i] = row < r_count;
    a_src[i] = a_ok[i] ? a_row<kGateUp>(g, r_begin + row) : g.a;
    if constexpr (!kFp8) b_src[i] = g.w + (int64_t{e} * w_rows + b_weight_row<kGateUp>(g, n0, row, b_ok[i])) * g.K;
  }
  const int c_chunk = tid & 3;
  const uint8_t* c_src[2] = {};
  const float* c_scale[2] = {};  // the chunk's weight row's scales, one per 128 columns
  bool c_ok[2] = {};
  if constexpr (kFp8) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t wrow = int64_t{e} * w_rows + b_weight_row<kGateUp>(g, n0, tid / 4 + 64 * i, c_ok[i]);
      c_src[i] = g.w8 + wrow * g.K + 16 * c_chunk;
      c_scale[i] = g.w_scale + (wrow / 128) * (g.K / 128);
    }
  }
  const int k_tiles = (g.K + kBK - 1) / kBK;
  auto load_stage = [&](int stage, int kt) {
    const int k = kt * kBK + chunk * 8;
    const bool k_ok = k < g.K;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned at = swizzled(tid / 8 + 32 * i, chunk);
      cp_async16_zfill(a_tile(stage) + at, a_src[i] + (k_ok ? k : 0), a_ok[i] && k_ok);
      if constexpr (!kFp8) cp_async16_zfill(b_tile(stage) + at, b_src[i] + (k_ok ? k : 0), b_ok[i] && k_ok);
    }
    if constexpr (kFp8)  // K is a multiple of 128: every chunk of a k tile exists
#pragma unroll
      for (int i = 0; i < 2; ++i)
        cp_async16_zfill(code_tile(stage) + (tid / 4 + 64 * i) * kBK + 16 * c_chunk,
                         c_src[i] + (c_ok[i] ? kt * kBK : 0), c_ok[i]);
  };
  // fp8: this thread's landed codes of k tile kt as bf16 into B tile kt % 2 (last read by tile kt - 2's wgmmas,
  // complete everywhere since the previous barrier): code chunk c of a row = bf16 chunks 2 c and 2 c + 1.
  auto convert_stage = [&](int kt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = tid / 4 + 64 * i;
      // An asm load with a memory clobber: kept after cp_async_wait (itself an asm without one).
      uint4 codes;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(codes.x), "=r"(codes.y), "=r"(codes.z), "=r"(codes.w)
                   : "r"(code_tile(kt % kStages) + row * kBK + 16 * c_chunk)
                   : "memory");
      const float scale = c_ok[i] ? __ldg(c_scale[i] + kt * kBK / 128) : 0.f;
      uint4 lo, hi;
      dequantize16(codes, scale, lo, hi);
      const unsigned dst = b_tile(kt % 2);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + swizzled(row, 2 * c_chunk)), "r"(lo.x),
                   "r"(lo.y), "r"(lo.z), "r"(lo.w)
                   : "memory");
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + swizzled(row, 2 * c_chunk + 1)), "r"(hi.x),
                   "r"(hi.y), "r"(hi.z), "r"(hi.w)
                   : "memory");
    }
  };

  const int wg = tid >> 7;  // the warpgroup: rows [64 wg, 64 wg + 64) of the tile
  float acc[64] = {};       // 16 n8 tiles x the mma.sync C fragment of the warp's 16 rows
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    if constexpr (kFp8) convert_stage(kt);
    fence_proxy_async_smem();  // this thread's cp.async (fp8: dequantized) writes -> visible to the tensor cores
    __syncthreads();  // stage kt has landed (and is converted) for every thread; tile kt - 1's wgmmas are complete
    if (kt + kStages - 1 < k_tiles) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();
    const unsigned a = a_tile(kt % kStages) + wg * 64 * 128, b = b_tile(kFp8 ? kt % 2 : kt % kStages);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      WgmmaSS<128>::run(acc, wgmma_desc(a + kk * 32, 16, 1024), wgmma_desc(b + kk * 32, 16, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc);
  }
  cp_async_wait<0>();

  // Epilogue: n8 tile j of the warp's 16 rows holds rows gq + 8 h, columns 8 j + 2 tq + c at acc[4 j + 2 h + c].
  const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = wg * 64 + (warp & 3) * 16 + gq + 8 * h;
    if (row >= r_count) continue;
    __nv_bfloat16* out = g.out + int64_t{r_begin + row} * g.N;
#pragma unroll
    for (int j = 0; j < (kGateUp ? 8 : 16); ++j) {
      float y[2];
      int col;
      if constexpr (kGateUp) {  // n8 tiles 4 q + {0, 1}: gate columns 16 q + ...; 4 q + {2, 3}: their up rows
        const int jg = 4 * (j / 2) + j % 2;
        col = n0 + 16 * (j / 2) + 8 * (j % 2) + 2 * tq;
#pragma unroll
        for (int c = 0; c < 2; ++c)
          y[c] = gemv_detail::silu(bf16_round(acc[4 * jg + 2 * h + c])) * bf16_round(acc[4 * (jg + 2) + 2 * h + c]);
      } else {
        col = n0 + 8 * j + 2 * tq;
        y[0] = acc[4 * j + 2 * h];
        y[1] = acc[4 * j + 2 * h + 1];
      }
      store_pair(out, col, g.N, y[0], y[1]);
    }
  }
#else
  __trap();  // built without sm_90a: the host never launches this (moe_gemm_wgmma answers false)
#endif
}

template <bool kGateUp, bool kFp8>
bool launch(const GroupedArgs& a, ops::Stream s) {
  constexpr size_t smem = smem_bytes<kFp8>();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  static PerDeviceFlag usable;
  const bool ok = usable.get(device, [](int dev) {
    if (!runs_sm90a_code(dev, reinterpret_cast<const void*>(moe_gemm_wgmma_kernel<kGateUp, kFp8>))) return false;
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return static_cast<size_t>(optin) >= smem;
  });
  if (!ok) return false;
  static PerDeviceFlag smem_raised;
  once_per_current_device(smem_raised, [] {
    CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_wgmma_kernel<kGateUp, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  });
  const unsigned slots = static_cast<unsigned>(a.E < a.P ? a.E : a.P);
  const unsigned row_tiles = ceil_div_u(a.P, kBM) + slots;  // each expert wastes at most one partial tile
  const dim3 grid(row_tiles, ceil_div_u(a.N, kGateUp ? kBN / 2 : kBN));
  launch_pdl(moe_gemm_wgmma_kernel<kGateUp, kFp8>, grid, dim3(kThreads), smem, s, a);
  return true;
}

}  // namespace

bool moe_gemm_wgmma(const GroupedArgs& a, bool gate_up, ops::Stream s) {
  if (a.w8 != nullptr) return gate_up ? launch<true, true>(a, s) : launch<false, true>(a, s);
  return gate_up ? launch<true, false>(a, s) : launch<false, false>(a, s);
}

}  // namespace nanovllm::cuda_ops::moe_grouped
