// Hopper (sm_90a) linear for decode-sized batches: out[T, N] = in[T, K] @ W[N, K]^T (linear_wgmma.h).
//
// Why: at decode batch sizes a projection is a weight stream. cuBLASLt reaches the copy rate on the
// largest weights but cannot take part in PDL and pays ~3 us of fixed cost per GEMM at T = 32-256; the
// CUDA-core gemv (gemv.cu) stalls on its own dot products at one CTA per SM. Here the tensor cores do
// the math, so a CTA's consumers spend a few dozen cycles per 64-column stage and the ring stays full.
//
// Tiling: W rows are the wgmma M (64 per consumer warpgroup), tokens the wgmma N (token_tile, zero-
// padded by TMA past T), K in 64-column chunks (one 128-byte swizzled row each). Grid (row tiles,
// k_split, token tiles); the k_split CTAs of a row tile form one cluster.
//
// CTA = `warpgroups` consumer warpgroups + 1 producer warp. Shared memory (1024-byte aligned):
//   ring   [stages][W tile: warpgroups * 64 rows][128 B] + [X tile: token_tile rows][128 B], both in the
//          128-byte-swizzle layout TMA writes and wgmma reads (wgmma.cuh);
//   after the loop the ring is reused for the fp32 partial tile P[token_tile][warpgroups * 64 + 4];
//   full[stages], empty[stages] mbarriers.
// Producer (one thread): the weight copies of the first `stages` chunks go out before griddepcontrol.wait
// (PDL: weights are never written by a predecessor), the token copies after it; then each refill waits
// for its stage's `empty` barrier. Consumers: wait `full`, 4 wgmma m64nNk16 per chunk, release the
// previous chunk's stage once its wgmmas completed (wait_group 1).
// Epilogue: accumulators -> P; cluster barrier; CTA `rank` of the cluster sums rows
// [rank, rank + 1) * rows / k_split of every peer's P (fixed order: rank 0 first) and stores them.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <tuple>

#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/cuda/bulk_copy.cuh"
#include "nanovllm/kernels/cuda/cluster.cuh"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/linear_wgmma.h"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"
#include "nanovllm/kernels/cuda/wgmma.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kChunk = 64;       // K columns per stage (one 128-byte swizzled row)
constexpr int kRowBytes = 128;   // bytes per swizzled tile row
constexpr int kPadRows = 4;      // P row padding (floats): conflict-free accumulator stores

constexpr int stage_bytes(int nt, int wgs, int boxes) { return boxes * (wgs * 64 + nt) * kRowBytes; }
__host__ __device__ constexpr int partial_bytes(int nt, int wgs) { return nt * (wgs * 64 + kPadRows) * 4; }
// Dynamic shared memory of a launch: the ring (or the partial tile, if larger), the barriers, and 1 KB so
// the base can be aligned to the swizzle atom.
size_t smem_bytes(const WgmmaLinearConfig& c) {
  const int ring = c.stages * stage_bytes(c.token_tile, c.warpgroups, c.boxes);
  return static_cast<size_t>(std::max(ring, partial_bytes(c.token_tile, c.warpgroups))) + 2 * 8 * c.stages + 1024;
}

#ifdef NANOVLLM_WGMMA_DEVICE
// One TMA 2D tile copy (box of the tensor map) into shared memory, counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
}
#endif

struct Args {
  void* out;  // [T, N] bf16 or f32
  int out_f32;
  int T, N, K;
  int row_tiles;         // ceil(N / rows per CTA)
  int boxes;             // 64-column boxes per stage
  int chunks;            // stages' worth of K: ceil(K / (64 boxes))
  int chunks_per_split;  // of a K split (gridDim.y CTAs per cluster)
  int stages;
};

template <int NT, int WG>
__global__ void __launch_bounds__(WG * 128 + 32, 1)
    linear_wgmma_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, Args a) {
#ifdef NANOVLLM_WGMMA_DEVICE
  constexpr int kRows = WG * 64;                  // weight rows per CTA
  constexpr int kWBox = kRows * kRowBytes;        // one 64-column weight box
  constexpr int kXBox = NT * kRowBytes;           // one 64-column token box
  constexpr int kPStride = kRows + kPadRows;      // P row stride (floats)
  const int stage = a.boxes * (kWBox + kXBox);    // bytes per ring stage: [boxes][W box], [boxes][X box]
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  float* part = reinterpret_cast<float*>(smem);  // [NT][kPStride], after the loop (K splits only)
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + max(a.stages * stage, partial_bytes(NT, WG)));  // [stages]
  uint64_t* empty = full + a.stages;                                                            // [stages]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int ks = gridDim.y, split = blockIdx.y, t0 = blockIdx.z * NT;
  const int c_begin = split * a.chunks_per_split;
  const int nchunks = max(0, min(a.chunks, c_begin + a.chunks_per_split) - c_begin);  // per tile
  // Row tiles of this CTA: blockIdx.x, + gridDim.x, ... (one per CTA when K is split).
  const int my_tiles = a.row_tiles > (int)blockIdx.x ? (a.row_tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = my_tiles * nchunks;  // ring steps of this CTA
  // Boxes of ring step g that hold columns < K (the rest of the stage is never copied nor read).
  auto valid_boxes = [&](int g) {
    const int col = (c_begin + g % max(nchunks, 1)) * a.boxes * kChunk;
    return min(a.boxes, (a.K - col + kChunk - 1) / kChunk);
  };

  if (tid == 0) {
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], WG * 4);  // lane 0 of every consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp == WG * 4) {  // ---- producer warp ----
    if (lane == 0) {
      auto load = [&](int g, bool weights, bool tokens) {
        unsigned char* st = smem + (g % a.stages) * stage;
        const int n0 = (blockIdx.x + (g / nchunks) * gridDim.x) * kRows;
        const int col = (c_begin + g % nchunks) * a.boxes * kChunk, nb = valid_boxes(g);
        for (int b = 0; b < nb; ++b) {
          if (weights) tma_load_2d(st + b * kWBox, &wmap, col + b * kChunk, n0, &full[g % a.stages]);
          if (tokens)
            tma_load_2d(st + a.boxes * kWBox + b * kXBox, &xmap, col + b * kChunk, t0, &full[g % a.stages]);
        }
      };
      const int pre = min(total, a.stages);
      for (int g = 0; g < pre; ++g) {  // weights first: no predecessor writes them
        mbar_arrive_expect_tx(&full[g], valid_boxes(g) * (kWBox + kXBox));
        load(g, true, false);
      }
      pdl_wait();
      pdl_trigger();
      for (int g = 0; g < pre; ++g) load(g, false, true);
      for (int g = pre; g < total; ++g) {
        const int s = g % a.stages;
        mbar_wait(&empty[s], ((g / a.stages) - 1) & 1);
        mbar_arrive_expect_tx(&full[s], valid_boxes(g) * (kWBox + kXBox));
        load(g, true, true);
      }
    } else {
      pdl_wait();
      pdl_trigger();
    }
  }

  // ---- consumers: acc = this warpgroup's 64 rows x NT tokens (wgmma accumulator layout) ----
  const int wg = warp >> 2, wwarp = warp & 3;
  // accumulator element (row, token): row = 16 wwarp + lane / 4 (+ 8), token = 8 j + 2 (lane % 4) (+ 1)
  const int acc_row = wg * 64 + wwarp * 16 + (lane >> 2), acc_tok = 2 * (lane & 3);
  float acc[NT / 2];
  if (warp < WG * 4) {
    pdl_wait();
    pdl_trigger();
    const unsigned base = smem_u32(smem);
    int g = 0;
    for (int tile = 0; tile < my_tiles; ++tile) {
#pragma unroll
      for (int i = 0; i < NT / 2; ++i) acc[i] = 0.0f;
      for (int c = 0; c < nchunks; ++c, ++g) {
        const int s = g % a.stages, nb = valid_boxes(g);
        mbar_wait(&full[s], (g / a.stages) & 1);
        const unsigned w_st = base + s * stage + wg * 64 * kRowBytes, x_st = base + s * stage + a.boxes * kWBox;
        wgmma_fence();
        for (int b = 0; b < nb; ++b) {
#pragma unroll
          for (int kk = 0; kk < kChunk / 16; ++kk)
            WgmmaSS<NT>::run(acc, wgmma_desc(w_st + b * kWBox + kk * 32, 16, 1024),
                             wgmma_desc(x_st + b * kXBox + kk * 32, 16, 1024), 1);
        }
        wgmma_commit();
        wgmma_wait<1>();  // step g - 1's wgmmas are done: its stage may be refilled
        fence_regs(acc);
        if (c > 0 && lane == 0) mbar_arrive(&empty[(g - 1) % a.stages]);
      }
      wgmma_wait<0>();
      fence_regs(acc);
      if (nchunks > 0 && lane == 0) mbar_arrive(&empty[(g - 1) % a.stages]);
      if (ks == 1) {  // whole K here: store straight from the accumulators
        const int n0 = (blockIdx.x + tile * gridDim.x) * kRows;
#pragma unroll
        for (int j = 0; j < NT / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int t = t0 + 8 * j + acc_tok + (e & 1), n = n0 + acc_row + 8 * (e >> 1);
            if (t >= a.T || n >= a.N) continue;
            if (a.out_f32) static_cast<float*>(a.out)[int64_t{t} * a.N + n] = acc[4 * j + e];
            else static_cast<__nv_bfloat16*>(a.out)[int64_t{t} * a.N + n] = __float2bfloat16_rn(acc[4 * j + e]);
          }
        }
      }
    }
  }
  if (ks == 1) return;

  // ---- K split: one tile per CTA; partials -> P, summed over the cluster ----
  __syncthreads();  // every wgmma has read its stage: the ring becomes P
  if (warp < WG * 4) {
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) {
      float* p = part + (8 * j + acc_tok) * kPStride + acc_row;
      p[0] = my_tiles > 0 ? acc[4 * j] : 0.0f;
      p[kPStride] = my_tiles > 0 ? acc[4 * j + 1] : 0.0f;
      p[8] = my_tiles > 0 ? acc[4 * j + 2] : 0.0f;
      p[kPStride + 8] = my_tiles > 0 ? acc[4 * j + 3] : 0.0f;
    }
  }
  cluster_sync();

  // This CTA's rows of the tile: [split, split + 1) * kRows / ks, every peer's partial in rank order.
  const int n0 = blockIdx.x * kRows;
  const int rows_mine = kRows / ks, r_first = split * rows_mine;
  const int tokens = min(NT, a.T - t0), rows_valid = min(kRows, a.N - n0);
  const bool pairs = (a.N & 1) == 0;
  const unsigned part_addr = smem_u32(part);
  for (int e = tid; e < tokens * (rows_mine / 2); e += blockDim.x) {
    const int t = e / (rows_mine / 2), r = r_first + 2 * (e % (rows_mine / 2));
    if (r >= rows_valid) continue;
    float2 v = make_float2(0.0f, 0.0f);
    for (int i = 0; i < ks; ++i) {
      const float2 q = ld_cluster_f32x2(part_addr + (t * kPStride + r) * 4, i);
      v.x += q.x;
      v.y += q.y;
    }
    const int64_t o = int64_t{t0 + t} * a.N + n0 + r;
    const bool two = r + 1 < rows_valid;
    if (a.out_f32) {
      float* out = static_cast<float*>(a.out);
      out[o] = v.x;
      if (two) out[o + 1] = v.y;
    } else {
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(a.out);
      if (two && pairs) {
        *reinterpret_cast<__nv_bfloat162*>(out + o) = __floats2bfloat162_rn(v.x, v.y);
      } else {
        out[o] = __float2bfloat16_rn(v.x);
        if (two) out[o + 1] = __float2bfloat16_rn(v.y);
      }
    }
  }
  cluster_sync();  // no CTA exits while a peer still reads its partials
#else
  __trap();  // built without sm_90a: the host never launches this (see usable())
#endif
}

// ---- host side ----

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    NANOVLLM_CHECK(q == cudaDriverEntryPointSuccess && p != nullptr,
                   "linear_wgmma: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Tensor map of a row-major bf16 [rows, K] matrix, boxes of [box_rows, 64] in the 128-byte swizzle;
// out-of-bounds rows and columns read as zeros.
CUtensorMap tensor_map(const void* base, int64_t rows, int64_t K, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K * 2)};
  const cuuint32_t box[2] = {kChunk, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                                 box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  NANOVLLM_CHECK(r == CUDA_SUCCESS, "linear_wgmma: cuTensorMapEncodeTiled failed (", static_cast<int>(r),
                 ") for [", rows, ", ", K, "] box ", box_rows);
  return m;
}

using Kernel = void (*)(CUtensorMap, CUtensorMap, Args);

template <int NT>
Kernel kernel_for(int wgs) {
  return wgs == 2 ? linear_wgmma_kernel<NT, 2> : linear_wgmma_kernel<NT, 1>;
}
Kernel kernel_for(int nt, int wgs) {
  switch (nt) {
    case 8: return kernel_for<8>(wgs);
    case 16: return kernel_for<16>(wgs);
    case 32: return kernel_for<32>(wgs);
    case 64: return kernel_for<64>(wgs);
    case 128: return kernel_for<128>(wgs);
    default: return kernel_for<256>(wgs);
  }
}

// The device runs sm_90a code of the kernel (compute capability 9.0, binary version 90); the maximum
// dynamic shared memory is raised once per device for every instantiation.
bool usable(int device) {
  static PerDeviceFlag flag;
  return flag.get(device, [](int dev) {
    if (!runs_sm90a_code(dev, reinterpret_cast<const void*>(linear_wgmma_kernel<8, 1>))) return false;
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    for (int nt : {8, 16, 32, 64, 128, 256})
      for (int wgs : {1, 2})
        CUDA_CHECK(cudaFuncSetAttribute(kernel_for(nt, wgs), cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    return true;
  });
}

}  // namespace

bool linear_wgmma_available(int device) { return usable(device); }

int linear_wgmma_token_tile(int64_t T) {
  int nt = 8;
  while (nt < T && nt < 256) nt *= 2;
  return nt;
}

bool linear_wgmma_supported(TensorView out, TensorView in, TensorView weight) {
  if (in.dtype() != DType::kBF16 || weight.dtype() != DType::kBF16) return false;
  if (out.dtype() != DType::kBF16 && out.dtype() != DType::kF32) return false;
  if (in.ndim() != 2 || weight.ndim() != 2 || out.ndim() != 2) return false;
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  if (weight.dim(1) != K || out.dim(0) != T || out.dim(1) != N || K % 8 != 0 || T < 1 || N < 1) return false;
  if (T > (int64_t{1} << 20) || N > (int64_t{1} << 30)) return false;
  if (!aligned16(in.data()) || !aligned16(weight.data())) return false;
  return usable(out.device().index);
}

void linear_wgmma(TensorView out, TensorView in, TensorView weight, ops::Stream s, const WgmmaLinearConfig& cfg) {
  NANOVLLM_CHECK(linear_wgmma_supported(out, in, weight), "linear_wgmma: unsupported tensors");
  const int nt = cfg.token_tile, wgs = cfg.warpgroups, ks = cfg.k_split;
  NANOVLLM_CHECK((nt == 8 || nt == 16 || nt == 32 || nt == 64 || nt == 128 || nt == 256) && (wgs == 1 || wgs == 2) &&
                     (ks == 1 || ks == 2 || ks == 4 || ks == 8) && cfg.stages >= 2 && cfg.boxes >= 1 &&
                     cfg.boxes <= 8 && cfg.ctas >= 0,
                 "linear_wgmma: bad config");
  const int device = out.device().index;
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  Args a{};
  a.out = out.data();
  a.out_f32 = out.dtype() == DType::kF32;
  a.T = static_cast<int>(T);
  a.N = static_cast<int>(N);
  a.K = static_cast<int>(K);
  a.row_tiles = static_cast<int>((N + wgs * 64 - 1) / (wgs * 64));
  a.boxes = cfg.boxes;
  a.chunks = static_cast<int>((K + kChunk * cfg.boxes - 1) / (kChunk * cfg.boxes));
  a.chunks_per_split = (a.chunks + ks - 1) / ks;
  WgmmaLinearConfig run = cfg;
  run.stages = std::max(1, std::min(cfg.stages, a.chunks_per_split * a.row_tiles));
  a.stages = run.stages;
  const size_t smem = smem_bytes(run);
  NANOVLLM_CHECK(smem <= static_cast<size_t>(optin), "linear_wgmma: ", smem, " bytes of shared memory (",
                 cfg.stages, " stages) exceed the device's ", optin);
  const CUtensorMap wmap = tensor_map(weight.data(), N, K, wgs * 64);
  const CUtensorMap xmap = tensor_map(in.data(), T, K, nt);

  cudaLaunchConfig_t lc{};
  // K split: one row tile per CTA (clusters along y); otherwise cfg.ctas CTAs loop over the row tiles.
  const int ctas = ks > 1 || cfg.ctas == 0 ? a.row_tiles : std::min(cfg.ctas, a.row_tiles);
  lc.gridDim = dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(ks), static_cast<unsigned>((T + nt - 1) / nt));
  lc.blockDim = dim3(static_cast<unsigned>(wgs * 128 + 32));
  lc.dynamicSmemBytes = smem;
  lc.stream = stream_of(s);
  cudaLaunchAttribute attr[2];
  int n = 0;
  if (ks > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 1;
    attr[n].val.clusterDim.y = static_cast<unsigned>(ks);
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl_use_attribute()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  lc.attrs = attr;
  lc.numAttrs = static_cast<unsigned>(n);
  CUDA_CHECK(cudaLaunchKernelEx(&lc, kernel_for(nt, wgs), wmap, xmap, a));
}

std::vector<WgmmaLinearConfig> linear_wgmma_candidates(int64_t T, int64_t N, int64_t K, int device, bool small_ring) {
  std::vector<WgmmaLinearConfig> out;
  int optin = 0, per_sm_smem = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  const int sms = cuda_sm_count(device);
  const int nt = linear_wgmma_token_tile(T);
  const int64_t token_tiles = (T + nt - 1) / nt;
  constexpr int kSmallRing = 96 << 10;
  for (int boxes : {1, 4}) {
    const int64_t chunks = (K + kChunk * boxes - 1) / (kChunk * boxes);
    for (int wgs : {1, 2}) {
      const int64_t row_tiles = (N + wgs * 64 - 1) / (wgs * 64);
      for (int ks : {1, 2, 4, 8}) {
        const int64_t ctas1 = row_tiles * token_tiles;
        if (ks > 1 && (chunks < 2 * ks || ctas1 * ks > 2 * sms)) continue;  // splits of < 2 steps, > 2 waves
        if (ks > 1 && ctas1 * (ks / 2) >= sms) continue;                     // half the split fills a wave already
        for (int budget : {kSmallRing, optin}) {
          if (small_ring && budget != kSmallRing) continue;
          WgmmaLinearConfig c{nt, wgs, ks, 2, boxes, 0};
          while (true) {
            WgmmaLinearConfig more = c;
            ++more.stages;
            if (smem_bytes(more) > static_cast<size_t>(budget)) break;
            c = more;
          }
          if (smem_bytes(c) > static_cast<size_t>(budget)) continue;
          c.stages = static_cast<int>(std::min<int64_t>(c.stages, std::max<int64_t>(2, chunks / ks * row_tiles)));
          if (ks == 1) {  // persistent: as many CTAs as can be resident (rows tiles loop over them)
            const int per_sm = std::clamp(per_sm_smem / static_cast<int>(smem_bytes(c) + 1024), 1, 2);
            c.ctas = static_cast<int>(std::min<int64_t>(row_tiles, std::max<int64_t>(1, sms * per_sm / token_tiles)));
          }
          const bool dup = std::any_of(out.begin(), out.end(), [&](const WgmmaLinearConfig& o) {
            return std::tie(o.token_tile, o.warpgroups, o.k_split, o.stages, o.boxes, o.ctas) ==
                   std::tie(c.token_tile, c.warpgroups, c.k_split, c.stages, c.boxes, c.ctas);
          });
          if (!dup) out.push_back(c);
        }
      }
    }
  }
  return out;
}

}  // namespace nanovllm::cuda_ops
