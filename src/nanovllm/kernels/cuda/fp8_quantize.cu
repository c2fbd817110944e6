// Activation quantization for the fp8 GEMM (fp8_linear.h): per row and 128-column group, scale = max |x| / 448
// (1 for an all-zero group) and codes e4m3(x / scale), round to nearest even, saturating. IEEE division and
// cvt.rn.satfinite: the same bits as the CPU reference (quantize_fp8_blocks of one row). One warp per group:
// each lane converts 4 consecutive values (one 8-byte load, one 4-byte store). The scales go row-major (the
// mma.sync GEMM's) or k-block-major (cuBLASLt's VEC128_32F layout: Fp8ScaleLayout).
#include <cuda_fp8.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kWarps = 8;

// x [rows, K] bf16 -> codes [rows, K], scales [rows, k_blocks] (row-major) or [k_blocks, rows] (k-block-major);
// groups = rows * k_blocks, k_blocks = K / 128.
__global__ void __launch_bounds__(kWarps * 32)
fp8_quantize_kernel(uint32_t* __restrict__ codes, float* __restrict__ scales, const uint2* __restrict__ x,
                    int64_t groups, int64_t rows, int64_t k_blocks, bool k_block_major) {
  const int lane = threadIdx.x & 31;
  const int64_t g = int64_t{blockIdx.x} * kWarps + (threadIdx.x >> 5);
  pdl_wait();
  pdl_trigger();
  if (g >= groups) return;
  const uint2 v = x[g * 32 + lane];  // group g is 128 consecutive values of the row-major x: 32 lanes x 4
  const float f[4] = {__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16),
                      __uint_as_float(v.y & 0xffff0000u)};
  const float amax = warp_max(fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3]))));
  const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_fp8_storage_t c = __nv_cvt_float_to_fp8(f[i] / scale, __NV_SATFINITE, __NV_E4M3);
    packed |= static_cast<uint32_t>(c) << (8 * i);
  }
  codes[g * 32 + lane] = packed;
  if (lane == 0) scales[k_block_major ? (g % k_blocks) * rows + g / k_blocks : g] = scale;
}

}  // namespace

void fp8_quantize_activations(TensorView codes, TensorView scales, TensorView in, ops::Stream s,
                              Fp8ScaleLayout layout) {
  const int64_t rows = in.dim(0), K = in.dim(1);
  NANOVLLM_CHECK(in.dtype() == DType::kBF16 && K % 128 == 0, "fp8_quantize_activations: in must be BF16 [T, K] with "
                 "K a multiple of 128, got ", dtype_name(in.dtype()), " ", in.shape().str());
  const bool k_block_major = layout == Fp8ScaleLayout::kKBlockMajor;
  const Shape want = k_block_major ? Shape{K / 128, rows} : Shape{rows, K / 128};
  NANOVLLM_CHECK(codes.numel() == rows * K && scales.shape() == want && scales.dtype() == DType::kF32,
                 "fp8_quantize_activations: codes ", codes.shape().str(), " / scales ", scales.shape().str(),
                 " do not fit in ", in.shape().str(), " (scales ", want.str(), " expected)");
  NANOVLLM_CHECK(aligned16(in.data()) && aligned16(codes.data()), "fp8_quantize_activations: unaligned buffers");
  const int64_t groups = rows * (K / 128);
  if (groups == 0) return;
  launch_pdl(fp8_quantize_kernel, dim3(ceil_div_u(groups, kWarps)), dim3(kWarps * 32), 0, s,
             static_cast<uint32_t*>(codes.data()), scales.data_as<float>(), in.data_as<const uint2>(), groups, rows,
             K / 128, k_block_major);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
