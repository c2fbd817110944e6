// The fp8 GEMM of prefill and larger batches (fp8_linear.h): out[M, N] = sum over 128-column blocks b of
// (A codes . W codes over b) * a_scale[m, b] * w_scale[n / 128, b], with A the activations quantized per row and
// 128 columns (fp8_quantize.cu) and W the e4m3 weight [N, K].
//   * A CTA computes a 64 x 128 tile of out: one 128-row block of W, so one weight scale per k block. 8 warps in
//     2 (M) x 4 (N), each a 32 x 32 tile: 2 x 4 mma.sync m16n8k32 e4m3 per 32 columns of k.
//   * Per 128-column block the products accumulate in a fresh fp32 fragment (4 mma k-steps), then join the
//     tile's accumulator times both scales: the block scaling DeepSeek-V3 and vLLM use, which also keeps the
//     tensor cores' partial sums short.
//   * A and W tiles come to shared memory through cp.async (3 stages), rows padded from 128 to 144 bytes so
//     ldmatrix reads 8 rows without bank conflicts; A rows past M are zero-filled and never stored.
// A simpler cousin of a wgmma kernel: correct on every sm_89+ device, not the fastest on sm_90
// (docs/fp8.md records what it reaches).
#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/mma_utils.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kBM = 64, kBN = 128, kBK = 128;  // tile rows (tokens), columns (weight rows), k block
constexpr int kRowBytes = kBK + 16;            // padded smem row
constexpr int kStages = 3;
constexpr int kStageBytes = (kBM + kBN) * kRowBytes;
constexpr int kSmemBytes = kStages * kStageBytes;
constexpr int kThreads = 256;

// c += a * b: 16 x 32 e4m3 A (row), 32 x 8 e4m3 B (col), fp32 accumulators (fragments as m16n8k16's, with 4
// codes per register).
__device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;
  __trap();  // the host refuses devices below sm_89 (fp8_tensor_cores_available)
#endif
}

// Stage `stage` <- k block kb of the A rows [m0, m0 + 64) and W rows [n0, n0 + 128).
__device__ __forceinline__ void load_stage(unsigned char* smem, int stage, int kb, const uint8_t* a, const uint8_t* w,
                                           int m0, int n0, int M, int K) {
  unsigned char* base = smem + stage * kStageBytes;
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < kBM * kBK / 16 / kThreads; ++i) {  // 2 chunks of 16 bytes per thread
    const int c = tid + i * kThreads, row = c / 8, col = (c % 8) * 16;
    const bool valid = m0 + row < M;
    const uint8_t* src = a + int64_t{valid ? m0 + row : 0} * K + kb * kBK + col;
    cp_async16_zfill(smem_u32(base + row * kRowBytes + col), src, valid);
  }
  unsigned char* wbase = base + kBM * kRowBytes;
#pragma unroll
  for (int i = 0; i < kBN * kBK / 16 / kThreads; ++i) {  // 4 chunks per thread
    const int c = tid + i * kThreads, row = c / 8, col = (c % 8) * 16;
    cp_async16(wbase + row * kRowBytes + col, w + int64_t{n0 + row} * K + kb * kBK + col);
  }
}

// a [M, K] codes, a_scale [M, K / 128]; w [N, K] codes, w_scale [N / 128, K / 128]; bias [N] or null;
// out [M, N]. Grid (N / 128, ceil(M / 64)).
__global__ void __launch_bounds__(kThreads, 2)  // two CTAs per SM (2 x 83 KB of shared memory)
fp8_gemm_kernel(void* __restrict__ out, bool out_f32, const uint8_t* __restrict__ a, const float* __restrict__ a_scale,
                const uint8_t* __restrict__ w, const float* __restrict__ w_scale, const void* __restrict__ bias,
                int bias_dt, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warp_m = warp / 4, warp_n = warp % 4;
  const int g = lane >> 2, tq = lane & 3;
  const int nb = blockIdx.x, n0 = nb * kBN, m0 = blockIdx.y * kBM;
  const int k_blocks = K / kBK;

  pdl_wait();  // a is the quantization kernel's output
  pdl_trigger();

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_blocks) load_stage(smem, s, s, a, w, m0, n0, M, K);
    cp_async_commit();
  }
  float acc[2][4][4] = {};
  // This lane's ldmatrix rows: A (m-tile rows 0-15, k halves 0 / 16) and W (two n-tiles, k halves).
  const int a_row = warp_m * 32 + (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 16;
  const int b_row = warp_n * 32 + (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 16;
  for (int kb = 0; kb < k_blocks; ++kb) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kb landed for every thread; stage kb - 1 is free to refill
    if (kb + kStages - 1 < k_blocks) load_stage(smem, (kb + kStages - 1) % kStages, kb + kStages - 1, a, w, m0, n0, M, K);
    cp_async_commit();

    const unsigned char* stage = smem + (kb % kStages) * kStageBytes;
    const unsigned a_base = smem_u32(stage + a_row * kRowBytes + a_col);
    const unsigned b_base = smem_u32(stage + kBM * kRowBytes + b_row * kRowBytes + b_col);
    float block[2][4][4] = {};
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks) {
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) ldsm_x4(a_base + i * 16 * kRowBytes + ks * 32, af[i][0], af[i][1], af[i][2], af[i][3]);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        ldsm_x4(b_base + j * 16 * kRowBytes + ks * 32, bf[2 * j][0], bf[2 * j][1], bf[2 * j + 1][0], bf[2 * j + 1][1]);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_e4m3(block[i][j], af[i], bf[j][0], bf[j][1]);
    }
    const float ws = w_scale[int64_t{nb} * k_blocks + kb];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + warp_m * 32 + i * 16 + g + 8 * h;
        const float f = m < M ? a_scale[int64_t{m} * k_blocks + kb] * ws : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j][2 * h] = fmaf(block[i][j][2 * h], f, acc[i][j][2 * h]);
          acc[i][j][2 * h + 1] = fmaf(block[i][j][2 * h + 1], f, acc[i][j][2 * h + 1]);
        }
      }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + warp_m * 32 + i * 16 + g + 8 * h;
      if (m >= M) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = n0 + warp_n * 32 + j * 8 + 2 * tq;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (bias != nullptr) {
          v0 += load_f32(bias, bias_dt, n);
          v1 += load_f32(bias, bias_dt, n + 1);
        }
        const int64_t at = int64_t{m} * N + n;
        if (out_f32) {
          *reinterpret_cast<float2*>(static_cast<float*>(out) + at) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(out) + at) = __floats2bfloat162_rn(v0, v1);
        }
      }
    }
}

}  // namespace

// The loaded code of the kernel has the mma e4m3 path (built for sm_89+, running natively, not a JIT of an older
// target's PTX) and the device grants its shared memory; then raises the kernel's shared-memory limit, which is
// a per-device attribute.
bool fp8_tensor_cores_available(const DeviceContext& ctx) {
  static PerDeviceFlag usable;
  return usable.get(ctx.device(), [](int dev) {
    int major = 0, minor = 0, optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, fp8_gemm_kernel);
    if (e != cudaSuccess) (void)cudaGetLastError();
    const int arch = 10 * major + minor;
    if (e != cudaSuccess || arch < 89 || attr.binaryVersion < 89 || attr.ptxVersion < 89 || optin < kSmemBytes)
      return false;
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaFuncSetAttribute(fp8_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    CUDA_CHECK(cudaSetDevice(current));
    return true;
  });
}

void fp8_gemm(TensorView out, TensorView codes, TensorView scales, TensorView weight, TensorView weight_scale,
              TensorView bias, ops::Stream s) {
  const int64_t M = codes.dim(0), K = codes.dim(1), N = weight.dim(0);
  NANOVLLM_CHECK(fp8_tensor_cores_available(context_of(s)), "fp8_gemm: needs fp8 tensor cores (sm_89+, this build's "
                 "code for it) on device ", context_of(s).device(), " (run with --quantization none)");
  NANOVLLM_CHECK(N % kBN == 0 && K % kBK == 0 && weight.dim(1) == K, "fp8_gemm: weight ", weight.shape().str(),
                 " and codes ", codes.shape().str(), ": N and K must be multiples of 128");
  NANOVLLM_CHECK(out.dtype() == DType::kBF16 || out.dtype() == DType::kF32, "fp8_gemm: out must be BF16 or F32");
  NANOVLLM_CHECK(aligned16(codes.data()) && aligned16(weight.data()) && (reinterpret_cast<uintptr_t>(out.data()) & 7) == 0,
                 "fp8_gemm: unaligned buffers");
  if (M == 0) return;
  static_assert(kSmemBytes > 48 * 1024, "fp8_tensor_cores_available raises the kernel's shared-memory limit");
  const dim3 grid(static_cast<unsigned>(N / kBN), ceil_div_u(M, kBM));
  launch_pdl(fp8_gemm_kernel, grid, dim3(kThreads), kSmemBytes, s, out.data(), out.dtype() == DType::kF32,
             codes.data_as<const uint8_t>(), scales.data_as<const float>(), weight.data_as<const uint8_t>(),
             weight_scale.data_as<const float>(), bias.defined() ? bias.data() : nullptr,
             bias.defined() ? dt(bias) : 0, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K));
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
