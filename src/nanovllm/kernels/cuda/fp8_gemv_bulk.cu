// The bulk-copy fp8 GEMV (sm_90; fp8_linear.h): out[T, N] = x[T, K] @ dequant(W)^T (+ bias), T <= kFp8GemvMaxTokens,
// x bf16, W e4m3 [N, K] with f32 scales per 128 x 128 block. The data path of gemv_bulk.cuh (bf16), the
// arithmetic of fp8_gemv.cu (fp8_gemv_device.cuh).
//
// Why: the register-fed fp8 kernel streamed 2.5-3.3 TB/s on the H200 where the bf16 bulk-copy GEMV reaches
// 3.5-4.2: its 8 warps hold few bytes in flight. Here one producer lane per W row keeps kStages row pieces of
// every row of a 16-row unit in flight in shared memory (cp.async.bulk), and requests the CTA's first stages
// before its pdl_wait(), so they stream during the predecessor.
//
// Work: units of one 16-row tile x kUnitK codes (16 row pieces of kUnitK bytes; kUnitK = 2048 keeps bf16's 2 KB
// pieces), laid end to end tile by tile (cpt = ceil(K / kUnitK) units per tile); CTA c takes units
// [c upc, (c + 1) upc); the ring holds ~96 KB (kStages = 6 / 3 / 2 for 1 / 2 / 4 KB pieces), so two CTAs fit
// per SM but at 4 KB. 4 or 8 consumer warps (Fp8GemvConfig::consumer_warps: the products cost ~3 integer ops per
// code, so one CTA per SM may want more warps than bf16's 4): consumer thread j takes 16-code column vectors col,
// col + kCols, ... (kCols = min(kUnitK / 16, consumer threads)) of rows [grp kRows, (grp + 1) kRows) of each unit
// (kGroups = consumer threads / kCols row groups): per vector it reads x's 16 values for each token (L1) and the
// block's scale once and reuses them for all its rows. A warp's 32 lanes read 512 contiguous bytes of one row:
// no bank conflicts, no pad.
// At the end of a tile each warp sums its lanes (warp_sum, fixed order) into red [warp][16 rows][kT] and
// gemv_bulk.cuh's bulk_finish_tile adds the warps in order and writes the tile, or publishes a partial that
// the tile's last CTA sums in CTA order (the gemv split workspace): deterministic for a given launch shape.
// Layouts: any N >= 1 (rows past N reread row N - 1 and are not stored), K a multiple of 16 (a 16-code vector
// lies in one 128-column block), scales [ceil(N / 128), ceil(K / 128)].
#include <algorithm>
#include <memory>

#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_gemv_device.cuh"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/gemv.cuh"
#include "nanovllm/kernels/cuda/gemv_bulk.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cuda_ops {
namespace {

using namespace fp8_gemv_detail;
constexpr int kRingBytes = 96 << 10;  // the ring's target size (bf16's 3 x 32 KB)

// kConsumers consumer warps (4 or 8) + 1 producer warp.
template <int kUnitK, int kConsumers>
struct BulkShape {
  static constexpr int kThreads = (kConsumers + 1) * 32;
  static constexpr int kStages = std::max(2, kRingBytes / (16 * kUnitK));
  static constexpr int kVecs = kUnitK / 16;                       // 16-code vectors per unit row
  static constexpr int kCols = std::min(kVecs, kConsumers * 32);  // consumer threads per row group
  static constexpr int kGroups = kConsumers * 32 / kCols;         // row groups
  static constexpr int kRows = 16 / kGroups;                      // rows per consumer thread
  static constexpr int kVecsPer = kVecs / kCols;                  // vectors per consumer thread per row
  static constexpr int kStageBytes = 16 * kUnitK;
  template <int kT>
  static constexpr size_t smem_bytes() {
    return size_t{kStages} * kStageBytes + size_t{kConsumers} * 16 * kT * 4 +  // red
           2 * kStages * sizeof(uint64_t) + 16;                                 // barriers, is_last
  }
  static_assert(kCols % 32 == 0 && kGroups * kCols == kConsumers * 32 && kVecsPer * kCols == kVecs && kRows >= 1,
                "a warp works on one row group");
};

// kT: tokens computed (T <= kT; the others reread row T - 1). Kc = K codes per row; cpt = units per tile; upc =
// units per CTA; units = row tiles x cpt. x [T, K] bf16; w [N, K] e4m3; w_scale [ceil(N / 128), ceil(K / 128)];
// bias [N] (any float dtype) or null; out [T, N]; ws / counters: the gemv split workspace.
// Two CTAs per SM where the ring allows and 4 consumer warps (registers capped at 65536 / 320 = 204 a thread:
// enough for T = 4 without spills); with 8 warps or 4 KB pieces the registers are not capped for two.
template <int kT, int kUnitK, int kConsumers>
__global__ void __launch_bounds__((kConsumers + 1) * 32, kConsumers == 4 && kUnitK < 4096 ? 2 : 1)
fp8_gemv_bulk_kernel(void* __restrict__ out, bool out_f32, const uint16_t* __restrict__ x, int T,
                     const uint8_t* __restrict__ w, const float* __restrict__ w_scale, const void* __restrict__ bias,
                     int bias_dt, int N, int K, int cpt, int upc, int units, float* __restrict__ ws,
                     unsigned* __restrict__ counters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using S = BulkShape<kUnitK, kConsumers>;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* stages = smem;                                                 // [stages][16][kUnitK]
  float* red = reinterpret_cast<float*>(smem + S::kStages * S::kStageBytes);    // [consumers][16][kT]
  uint64_t* full = reinterpret_cast<uint64_t*>(red + kConsumers * 16 * kT);     // [stages]
  uint64_t* empty = full + S::kStages;                                          // [stages]
  unsigned* is_last = reinterpret_cast<unsigned*>(empty + S::kStages);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int u_begin = static_cast<int>(blockIdx.x) * upc;
  const int n = min(units, u_begin + upc) - u_begin;  // > 0: the grid has ceil(units / upc) CTAs
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      mbar_init(&full[s], 1);                 // the producer's arrive (+ the bytes)
      mbar_init(&empty[s], kConsumers * 32);  // every consumer thread
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp == kConsumers) {
    gemv_detail::bulk_produce<S::kStages, kUnitK, kUnitK>(stages, full, empty, w, K, N, cpt, u_begin, n, lane);
    return;
  }

  // ---- Consumer warps. ----
  pdl_wait();  // x is the preceding kernel's output
  pdl_trigger();
  const int col = threadIdx.x % S::kCols, row0 = threadIdx.x / S::kCols * S::kRows;
  const int k_blocks = (K + 127) / 128;
  float acc[S::kRows][kT] = {};
  for (int i = 0; i < n; ++i) {
    const int u = u_begin + i, stage = i % S::kStages;
    const int tile = u / cpt, chunk = u - tile * cpt;
    const float* scale_row = w_scale + int64_t{tile * 16 / 128} * k_blocks;
    mbar_wait(&full[stage], static_cast<unsigned>(i / S::kStages) & 1u);
    const unsigned char* st = stages + stage * S::kStageBytes + row0 * kUnitK;
#pragma unroll
    for (int j = 0; j < S::kVecsPer; ++j) {
      const int v = col + j * S::kCols, k = chunk * kUnitK + v * 16;
      if (k >= K) break;  // past the row's end (the tile's last unit): not copied
      float xs[kT][16];
      load_x16<kT>(x, T, K, k, xs);
      const float scale = scale_row[k / 128];
#pragma unroll
      for (int r = 0; r < S::kRows; ++r)
        fp8x16_dot_add<kT>(*reinterpret_cast<const uint4*>(st + r * kUnitK + v * 16), xs, scale, acc[r]);
    }
    mbar_arrive(&empty[stage]);  // this thread's reads of the stage are done: the producer may refill it
    if (chunk == cpt - 1 || i == n - 1) {
      // Lanes -> red [warp][16 rows][kT]: the warp's row group summed, its other rows zero.
#pragma unroll
      for (int r = 0; r < S::kRows; ++r)
#pragma unroll
        for (int t = 0; t < kT; ++t) {
          const float v = warp_sum(acc[r][t]);
          if (lane == 0) red[(warp * 16 + row0 + r) * kT + t] = v;
          acc[r][t] = 0.0f;
        }
      if constexpr (S::kGroups > 1) {
        for (int e = lane; e < 16 * kT; e += 32) {
          const int r = e / kT;
          if (r < row0 || r >= row0 + S::kRows) red[warp * 16 * kT + e] = 0.0f;
        }
      }
      gemv_detail::bulk_consumer_sync<kConsumers>();
      if (out_f32) {
        gemv_detail::bulk_finish_tile<kT, true, kConsumers>(red, tile, u_begin, n, upc, cpt, T, N, out, bias, bias_dt,
                                                            ws, counters, is_last);
      } else {
        gemv_detail::bulk_finish_tile<kT, false, kConsumers>(red, tile, u_begin, n, upc, cpt, T, N, out, bias,
                                                             bias_dt, ws, counters, is_last);
      }
      gemv_detail::bulk_consumer_sync<kConsumers>();  // red is reused by the next tile
    }
  }
#endif
}

template <int kT, int kUnitK, int kConsumers>
void allow_smem() {
  CUDA_CHECK(cudaFuncSetAttribute(fp8_gemv_bulk_kernel<kT, kUnitK, kConsumers>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(BulkShape<kUnitK, kConsumers>::template smem_bytes<kT>())));
  prefer_max_shared_carveout(fp8_gemv_bulk_kernel<kT, kUnitK, kConsumers>);
}

template <int kUnitK>
void allow_smem_all() {
  allow_smem<1, kUnitK, 4>(), allow_smem<2, kUnitK, 4>(), allow_smem<4, kUnitK, 4>();
  allow_smem<1, kUnitK, 8>(), allow_smem<2, kUnitK, 8>(), allow_smem<4, kUnitK, 8>();
}

// A device context's state (DeviceContext::op_state): whether the kernel runs here; every instance opted into
// its shared memory.
struct Fp8BulkState {
  bool available = false;
  explicit Fp8BulkState(int device) {
    int major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, fp8_gemv_bulk_kernel<1, 2048, 4>));
    if (major < 9 || attr.binaryVersion < 90) return;
    allow_smem_all<1024>(), allow_smem_all<2048>(), allow_smem_all<4096>();
    available = true;
  }
};

Fp8BulkState& bulk_state(DeviceContext& ctx) {
  return ctx.op_state<Fp8BulkState>([&] { return std::make_unique<Fp8BulkState>(ctx.device()); });
}

int64_t units_per_tile(int64_t K, int unit_k) { return (K + unit_k - 1) / unit_k; }
int64_t total_units(int64_t N, int64_t K, int unit_k) { return (N + 15) / 16 * units_per_tile(K, unit_k); }

template <int kT, int kUnitK, int kConsumers>
void launch(const Fp8GemvConfig& c, TensorView out, TensorView in, TensorView weight, TensorView weight_scale,
            TensorView bias, ops::Stream s) {
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  const int64_t cpt = units_per_tile(K, kUnitK), units = total_units(N, K, kUnitK);
  const int64_t ctas = (units + c.units_per_cta - 1) / c.units_per_cta;
  const GemvSplitWorkspace split = gemv_split_workspace(context_of(s));
  NANOVLLM_CHECK(ctas * 2 * 16 * kT * 4 <= static_cast<int64_t>(split.ws_bytes) && (N + 15) / 16 <= split.counters &&
                     units <= INT32_MAX,
                 "fp8_gemv (bulk): shape out of range: N=", N, " K=", K, " units/CTA=", c.units_per_cta);
  using S = BulkShape<kUnitK, kConsumers>;
  launch_pdl(fp8_gemv_bulk_kernel<kT, kUnitK, kConsumers>, dim3(static_cast<unsigned>(ctas)), dim3(S::kThreads),
             S::template smem_bytes<kT>(), s, out.data(), out.dtype() == DType::kF32,
             in.data_as<const uint16_t>(), static_cast<int>(T), weight.data_as<const uint8_t>(),
             weight_scale.data_as<const float>(), bias.defined() ? bias.data() : nullptr,
             bias.defined() ? dt(bias) : 0, static_cast<int>(N), static_cast<int>(K), static_cast<int>(cpt),
             c.units_per_cta, static_cast<int>(units), split.ws, split.counters_data);
  CUDA_CHECK_LAUNCH();
}

template <int kUnitK, int kConsumers>
void launch_tokens(const Fp8GemvConfig& c, TensorView out, TensorView in, TensorView weight,
                   TensorView weight_scale, TensorView bias, ops::Stream s) {
  static_assert(kFp8GemvMaxTokens == 1, "one token: more take fp8_gemv_mma");
  launch<1, kUnitK, kConsumers>(c, out, in, weight, weight_scale, bias, s);
}

template <int kUnitK>
void launch_consumers(const Fp8GemvConfig& c, TensorView out, TensorView in, TensorView weight,
                      TensorView weight_scale, TensorView bias, ops::Stream s) {
  if (c.consumer_warps == 8) launch_tokens<kUnitK, 8>(c, out, in, weight, weight_scale, bias, s);
  else launch_tokens<kUnitK, 4>(c, out, in, weight, weight_scale, bias, s);
}

}  // namespace

bool fp8_gemv_bulk_available(DeviceContext& ctx) { return bulk_state(ctx).available; }

Fp8GemvConfig fp8_gemv_bulk_config(int64_t N, int64_t K, int unit_k, int ctas_per_sm, DeviceContext& ctx,
                                   int consumer_warps) {
  NANOVLLM_CHECK(unit_k == 1024 || unit_k == 2048 || unit_k == 4096, "fp8_gemv_bulk_config: unit_k ", unit_k,
                 " (1024, 2048 or 4096)");
  NANOVLLM_CHECK(ctas_per_sm >= 1, "fp8_gemv_bulk_config: ctas_per_sm ", ctas_per_sm, " (>= 1)");
  NANOVLLM_CHECK(consumer_warps == 4 || consumer_warps == 8, "fp8_gemv_bulk_config: consumer_warps ", consumer_warps,
                 " (4 or 8)");
  const int64_t units = total_units(N, K, unit_k), want = int64_t{ctas_per_sm} * ctx.sm_count();
  Fp8GemvConfig c;
  c.unit_k = unit_k;
  c.consumer_warps = consumer_warps;
  c.units_per_cta = static_cast<int>(std::max<int64_t>(1, (units + want - 1) / want));
  c.ctas = static_cast<int>((units + c.units_per_cta - 1) / c.units_per_cta);
  return c;
}

Fp8GemvConfig fp8_gemv_default_config(int64_t N, int64_t K, DeviceContext& ctx) {
  if (!fp8_gemv_bulk_available(ctx) || N * K < kFp8BulkMinBytes) return {};  // the register-fed kernel
  constexpr int kUnitK = 2048, kWarps = 8;
  const Fp8GemvConfig two_per_sm = fp8_gemv_bulk_config(N, K, kUnitK, 2, ctx, kWarps);
  if (two_per_sm.units_per_cta % units_per_tile(K, kUnitK) == 0) return two_per_sm;  // no tile split across CTAs
  return fp8_gemv_bulk_config(N, K, kUnitK, 1, ctx, kWarps);
}

void fp8_gemv_bulk(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                   ops::Stream s, const Fp8GemvConfig& c) {
  const int64_t N = weight.dim(0), K = weight.dim(1);
  NANOVLLM_CHECK(fp8_gemv_bulk_available(context_of(s)), "fp8_gemv (bulk): needs an sm_90 device and sm_90 code");
  NANOVLLM_CHECK(K % 16 == 0 && N >= 1, "fp8_gemv (bulk): in-features ", K, " must be a multiple of 16");
  NANOVLLM_CHECK(weight_scale.dtype() == DType::kF32 && weight_scale.dim(0) == (N + 127) / 128 &&
                     weight_scale.dim(1) == (K + 127) / 128,
                 "fp8_gemv (bulk): weight_scale must be F32 [", (N + 127) / 128, ", ", (K + 127) / 128, "], got ",
                 weight_scale.shape().str());
  NANOVLLM_CHECK(c.units_per_cta >= 1, "fp8_gemv (bulk): units_per_cta ", c.units_per_cta, " (>= 1)");
  NANOVLLM_CHECK(c.consumer_warps == 4 || c.consumer_warps == 8, "fp8_gemv (bulk): consumer_warps ",
                 c.consumer_warps, " (4 or 8)");
  switch (c.unit_k) {
    case 1024: return launch_consumers<1024>(c, out, in, weight, weight_scale, bias, s);
    case 2048: return launch_consumers<2048>(c, out, in, weight, weight_scale, bias, s);
    case 4096: return launch_consumers<4096>(c, out, in, weight, weight_scale, bias, s);
    default: NANOVLLM_CHECK(false, "fp8_gemv (bulk): unit_k ", c.unit_k, " (1024, 2048 or 4096)");
  }
}

}  // namespace nanovllm::cuda_ops
