// Row-stream gemv (sm_90): out[T, N] = in[T, K] @ W[N, K]^T for T <= 2 (gemv_rows.h).
//
// Why: the other weight-streaming kernels read each CTA's rows in column pieces (gemv_bulk.cuh: 2 KB of
// each of 16 rows per unit, rows 2K bytes apart), and their rate depends on that shape (session 12: 3.2-
// 4.2 TB/s). A TMA experiment (session 13) read the same bytes as contiguous per-CTA blocks and streamed
// the 8B LM head at 4.63 TB/s instead of 4.20. Row-major W already is contiguous per row range, so here
// CTA c owns rows [c N / C, (c + 1) N / C) and streams that one region front to back.
//
// Measured (H200, alone, L2-cold): the LM heads at 4.39 / 4.18 TB/s (8B / 0.6B) against 4.19 / 3.99 for
// the best other kernel; elsewhere a tie or slower, and bs=1 decode no faster end to end, so it is a
// dispatch candidate only on request (NANOVLLM_GEMV_ROWS=1, linear.cu).
//
// CTA = 8 consumer warps + 1 producer warp. Ring: `stages` x `stage_bytes`, one bulk copy per stage; the
// first `stages` copies go out before griddepcontrol.wait (weights only). A stage is consumed in
// 2 KB chunks (4 x 32 lanes x 16 bytes, within one row: K % 1024 == 0), chunk j by warp j % 8. A lane
// accumulates its products while the chunk's row stays the same; when it changes the warp reduces
// (shuffle tree) and lane 0 stores the warp's sum to part[warp][row][token]. At the end the 8 warp sums
// of each row are added in warp order: deterministic.
#include <algorithm>

#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/cuda/bulk_copy.cuh"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/gemv_rows.h"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;
constexpr int kVecs = 4;                  // 16-byte vectors per lane per warp step
constexpr int kChunkBytes = kVecs * 512;  // one warp step: kVecs x 32 lanes x 16 bytes, within one row

// Shared memory: ring, part[kConsumerWarps][rows_max][kT] floats, 2 x stages barriers.
size_t smem_bytes(const GemvRowsConfig& c, int64_t rows_max, int kT) {
  return static_cast<size_t>(c.stages) * c.stage_bytes + static_cast<size_t>(kConsumerWarps * rows_max * kT) * 4 +
         16 * static_cast<size_t>(c.stages);
}

template <int kT, bool kOutF32>
__global__ void __launch_bounds__(kThreads, 1)
    gemv_rows_kernel(void* __restrict__ out, const uint4* __restrict__ x, int x_pitch, const unsigned char* __restrict__ w,
                     int T, int N, int K, int rows_max, int stages, int stage_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  float* part = reinterpret_cast<float*>(smem + static_cast<size_t>(stages) * stage_bytes);  // [8][rows_max][kT]
  uint64_t* full = reinterpret_cast<uint64_t*>(part + kConsumerWarps * rows_max * kT);       // [stages]
  uint64_t* empty = full + stages;                                                            // [stages]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t r0 = int64_t{blockIdx.x} * N / gridDim.x, r1 = int64_t{blockIdx.x + 1} * N / gridDim.x;
  const int64_t row_bytes = int64_t{K} * 2, bytes = (r1 - r0) * row_bytes;
  const unsigned char* region = w + r0 * row_bytes;
  const int nst = static_cast<int>((bytes + stage_bytes - 1) / stage_bytes);

  for (int i = tid; i < kConsumerWarps * rows_max * kT; i += kThreads) part[i] = 0.0f;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // ---- producer ----
    if (lane == 0) {
      auto copy = [&](int g) {
        const int64_t off = int64_t{g} * stage_bytes;
        const unsigned n = static_cast<unsigned>((bytes - off < stage_bytes ? bytes - off : int64_t{stage_bytes}));
        mbar_arrive_expect_tx(&full[g % stages], n);
        bulk_copy_g2s(smem + (g % stages) * stage_bytes, region + off, n, &full[g % stages]);
      };
      const int pre = min(nst, stages);
      for (int g = 0; g < pre; ++g) copy(g);  // weights only: no predecessor writes them
      pdl_wait();
      pdl_trigger();
      for (int g = pre; g < nst; ++g) {
        mbar_wait(&empty[g % stages], ((g / stages) - 1) & 1);
        copy(g);
      }
    } else {
      pdl_wait();
      pdl_trigger();
    }
  } else {  // ---- consumers ----
    pdl_wait();
    pdl_trigger();
    const int kv_per_row = K / 8;
    float acc[kT];
#pragma unroll
    for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
    int cur = -1;  // local row being accumulated
    auto flush = [&] {
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        float v = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && cur >= 0) part[(warp * rows_max + cur) * kT + t] = v;
        acc[t] = 0.0f;
      }
    };
    for (int g = 0; g < nst; ++g) {
      mbar_wait(&full[g % stages], (g / stages) & 1);
      const int64_t off = int64_t{g} * stage_bytes;
      const int chunks = static_cast<int>((bytes - off < stage_bytes ? bytes - off : int64_t{stage_bytes}) / kChunkBytes);
      const unsigned char* st = smem + (g % stages) * stage_bytes;
      // This warp's first chunk of the stage: its row and first vector within the row (a chunk is
      // kVecs x 32 vectors of one row: K % 1024 == 0); later chunks advance by kConsumerWarps chunks.
      const int64_t v_first = (off + int64_t{warp} * kChunkBytes) / 16;
      int row = static_cast<int>(v_first / kv_per_row);
      int kv = static_cast<int>(v_first - int64_t{row} * kv_per_row);
      for (int j = warp; j < chunks; j += kConsumerWarps) {
        if (row != cur) {
          flush();
          cur = row;
        }
        uint4 wv[kVecs], xv[kVecs][kT];
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          wv[i] = *reinterpret_cast<const uint4*>(st + j * kChunkBytes + (i * 32 + lane) * 16);
#pragma unroll
          for (int t = 0; t < kT; ++t)
            if (t < T) xv[i][t] = __ldg(x + int64_t{t} * x_pitch + kv + i * 32 + lane);
        }
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          float wf[8];
          bf16x8_to_f32(wv[i], wf);
#pragma unroll
          for (int t = 0; t < kT; ++t) {
            if (t < T) {
              float xf[8];
              bf16x8_to_f32(xv[i][t], xf);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
            }
          }
        }
        kv += kConsumerWarps * kVecs * 32;
        while (kv >= kv_per_row) kv -= kv_per_row, ++row;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[g % stages]);
    }
    flush();
  }
  __syncthreads();

  // out[t][r0 + row] = the warps' sums in warp order
  for (int i = tid; i < (r1 - r0) * T; i += kThreads) {
    const int row = i / T, t = i % T;
    float s = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kConsumerWarps; ++wi) s += part[(wi * rows_max + row) * kT + t];
    const int64_t o = int64_t{t} * N + r0 + row;
    if (kOutF32) static_cast<float*>(out)[o] = s;
    else static_cast<__nv_bfloat16*>(out)[o] = __float2bfloat16_rn(s);
  }
#endif
}

using Kernel = void (*)(void*, const uint4*, int, const unsigned char*, int, int, int, int, int, int);

Kernel kernel_for(int kt, bool f32) {
  switch (kt) {
    case 1: return f32 ? gemv_rows_kernel<1, true> : gemv_rows_kernel<1, false>;
    default: return f32 ? gemv_rows_kernel<2, true> : gemv_rows_kernel<2, false>;
  }
}
int token_tile(int64_t T) { return T <= 1 ? 1 : 2; }

// sm_90 code on an sm_90+ device; the dynamic shared-memory limit raised once per device.
bool usable(int device) {
  static PerDeviceFlag flag;
  return flag.get(device, [](int dev) {
    int major = 0, optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, gemv_rows_kernel<1, false>);
    if (e != cudaSuccess) (void)cudaGetLastError();
    if (e != cudaSuccess || major < 9 || attr.binaryVersion < 90) return false;
    for (int kt : {1, 2})
      for (bool f32 : {false, true})
        CUDA_CHECK(cudaFuncSetAttribute(kernel_for(kt, f32), cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    return true;
  });
}

}  // namespace

bool gemv_rows_supported(TensorView out, TensorView in, TensorView weight) {
  if (in.dtype() != DType::kBF16 || weight.dtype() != DType::kBF16) return false;
  if (out.dtype() != DType::kBF16 && out.dtype() != DType::kF32) return false;
  if (in.ndim() != 2 || weight.ndim() != 2 || out.ndim() != 2) return false;
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  if (weight.dim(1) != K || out.dim(0) != T || out.dim(1) != N || K % 1024 != 0 || T < 1 ||
      T > kGemvRowsMaxTokens || N < 1 || N >= (int64_t{1} << 30) || K >= (int64_t{1} << 24))
    return false;
  if (!aligned16(in.data()) || !aligned16(weight.data())) return false;
  return usable(out.device().index);
}

void gemv_rows(TensorView out, TensorView in, TensorView weight, ops::Stream s, const GemvRowsConfig& cfg) {
  NANOVLLM_CHECK(gemv_rows_supported(out, in, weight), "gemv_rows: unsupported tensors");
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  NANOVLLM_CHECK(cfg.ctas >= 1 && cfg.stages >= 2 && cfg.stage_bytes >= kChunkBytes &&
                     cfg.stage_bytes % kChunkBytes == 0,
                 "gemv_rows: bad config");
  const int kt = token_tile(T);
  const int ctas = static_cast<int>(std::min<int64_t>(cfg.ctas, N));
  const int64_t rows_max = (N + ctas - 1) / ctas;
  const size_t smem = smem_bytes(cfg, rows_max, kt);
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, out.device().index));
  NANOVLLM_CHECK(smem <= static_cast<size_t>(optin), "gemv_rows: ", smem, " bytes of shared memory exceed ", optin);
  launch_pdl(kernel_for(kt, out.dtype() == DType::kF32), dim3(static_cast<unsigned>(ctas)), dim3(kThreads), smem,
             stream_of(s), out.data(), static_cast<const uint4*>(in.data()), static_cast<int>(K / 8),
             static_cast<const unsigned char*>(weight.data()), static_cast<int>(T), static_cast<int>(N),
             static_cast<int>(K), static_cast<int>(rows_max), cfg.stages, cfg.stage_bytes);
}

std::vector<GemvRowsConfig> gemv_rows_candidates(int64_t T, int64_t N, int64_t K, int device, bool small_ring) {
  (void)K;
  std::vector<GemvRowsConfig> out;
  int optin = 0, per_sm_smem = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  const int sms = cuda_sm_count(device), kt = token_tile(T);
  for (int per_sm : {1, 2}) {
    if (small_ring && per_sm > 1) continue;
    const int ctas = static_cast<int>(std::min<int64_t>(N, int64_t{sms} * per_sm));
    const int64_t rows_max = (N + ctas - 1) / ctas;
    const int budget = small_ring ? (96 << 10) : std::min(optin, per_sm_smem / per_sm - 2048);
    for (int stage_bytes : {16384, 32768}) {
      GemvRowsConfig c{ctas, stage_bytes, 2};
      while (smem_bytes(GemvRowsConfig{ctas, stage_bytes, c.stages + 1}, rows_max, kt) <= static_cast<size_t>(budget))
        ++c.stages;
      if (smem_bytes(c, rows_max, kt) <= static_cast<size_t>(budget)) out.push_back(c);
    }
  }
  return out;
}

}  // namespace nanovllm::cuda_ops
