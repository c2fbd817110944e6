// The fp8 linear's GEMV for decode batches (fp8_linear.h, fp8_gemv_mma): out[T, N] = x[T, K] @ dequant(W)^T
// (+ bias) for up to kFp8MmaGemvMaxTokens rows, x bf16, W e4m3 [N, K] with f32 scales per 128 x 128 block. Past a
// few rows the register-fed GEMV's per-token FMAs (each code decoded once, multiplied once per token) cost more than
// the weight stream, and the quantize + GEMM path pays the activation quantization and a GEMM tile built for
// hundreds of rows. Here the tokens ride the tensor cores: the codes become bf16 in registers and meet up to 16
// tokens in one mma.sync (fp8_mma_device.cuh), so a weight byte costs the same at 16 rows as at 5.
//   * A CTA owns a 16-row tile of W (inside one 128-row block: one scale per 128 columns) and its 8 warps split K
//     (warp steps of 256 k, two scale blocks), summed through shared memory in warp order (deterministic).
//   * Before waiting for its predecessor (PDL), each warp loads its first step of weights; x is read after.
//   * Tokens past T reread row T - 1 and are not stored.
#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/fp8_mma_device.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cuda_ops {
namespace {

using gemv_detail::kU;
constexpr int kWarps = 8;

struct Args {
  void* out;              // [T, N] bf16 or f32 (out_f32)
  const __nv_bfloat16* x; // [T, K]
  const uint8_t* w;       // [N, K] e4m3
  const float* w_scale;   // [N / 128, K / 128]
  const void* bias;       // [N] (bias_dt) or null
  int bias_dt, T, N, K;
  bool out_f32;
};

// kNT: 8-token B tiles (T <= 8 kNT).
template <int kNT>
__global__ void __launch_bounds__(kWarps * 32, 2) fp8_gemv_mma_kernel(Args a) {
  __shared__ float red[kWarps][16][8 * kNT];  // [warp (K part)][row][token]
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int gq = lane >> 2, q = lane & 3;
  const int r0 = static_cast<int>(blockIdx.x) * 16;
  const uint4* w_lo = reinterpret_cast<const uint4*>(a.w + int64_t{r0 + gq} * a.K);
  const uint4* w_hi = reinterpret_cast<const uint4*>(a.w + int64_t{r0 + gq + 8} * a.K);
  const int k_blocks = a.K / 128, c_end = a.K / 16;
  const float* scale = a.w_scale + int64_t{r0 / 128} * k_blocks;
  const int steps = (k_blocks + 1) / 2;
  const int s0 = steps * warp / kWarps, s1 = steps * (warp + 1) / kWarps;
  uint4 lo0[kU], hi0[kU], lo1[kU], hi1[kU];
  if (s0 < s1) fp8_mma_detail::load_codes_step(w_lo, w_hi, s0, c_end, q, lo0, hi0);  // weights: no dependency
  pdl_wait();  // x is the preceding kernel's output
  pdl_trigger();
  const uint4* xr[kNT];
  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    xr[nt] = reinterpret_cast<const uint4*>(a.x + int64_t{min(gq + 8 * nt, a.T - 1)} * a.K);
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  }
  for (int s = s0; s < s1; s += 2) {  // two register buffers: the next step's loads fly during the products
    if (s + 1 < s1) fp8_mma_detail::load_codes_step(w_lo, w_hi, s + 1, c_end, q, lo1, hi1);
    fp8_mma_detail::mma_step<kNT>(acc, lo0, hi0, xr, s, k_blocks, q, scale);
    if (s + 1 >= s1) break;
    if (s + 2 < s1) fp8_mma_detail::load_codes_step(w_lo, w_hi, s + 2, c_end, q, lo0, hi0);
    fp8_mma_detail::mma_step<kNT>(acc, lo1, hi1, xr, s + 1, k_blocks, q, scale);
  }
  // The accumulator fragment: acc[nt][i] is row gq + 8 (i / 2), token 8 nt + 2 q + i % 2.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][gq + 8 * (i >> 1)][8 * nt + 2 * q + (i & 1)] = acc[nt][i];
  __syncthreads();
  for (int o = static_cast<int>(threadIdx.x); o < 16 * 8 * kNT; o += kWarps * 32) {
    const int tok = o % (8 * kNT), row = o / (8 * kNT);
    if (tok >= a.T) continue;
    float v = 0.f;
    for (int w = 0; w < kWarps; ++w) v += red[w][row][tok];  // the K parts in order
    if (a.out_f32) gemv_detail::store_result<true>(a.out, tok, a.N, r0 + row, v, a.bias, a.bias_dt);
    else gemv_detail::store_result<false>(a.out, tok, a.N, r0 + row, v, a.bias, a.bias_dt);
  }
}

}  // namespace

void fp8_gemv_mma(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                  ops::Stream s) {
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  NANOVLLM_CHECK(T >= 1 && T <= kFp8MmaGemvMaxTokens, "fp8_gemv_mma: ", T, " rows; 1 to ", kFp8MmaGemvMaxTokens,
                 " supported");
  NANOVLLM_CHECK(in.dtype() == DType::kBF16 && (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32),
                 "fp8_gemv_mma: in must be BF16 and out BF16 or F32, got ", dtype_name(in.dtype()), " and ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(weight.dtype() == DType::kF8E4M3 && in.dim(1) == K && out.dim(0) == T && out.dim(1) == N &&
                     N % 128 == 0 && K % 128 == 0,
                 "fp8_gemv_mma: shapes in ", in.shape().str(), ", weight ", weight.shape().str(),
                 " (F8E4M3, N and K multiples of 128), out ", out.shape().str());
  NANOVLLM_CHECK(weight_scale.dtype() == DType::kF32 && weight_scale.shape() == Shape({N / 128, K / 128}),
                 "fp8_gemv_mma: weight_scale must be F32 [", N / 128, ", ", K / 128, "], got ",
                 weight_scale.shape().str());
  NANOVLLM_CHECK(aligned16(in.data()) && aligned16(weight.data()), "fp8_gemv_mma: in and weight must be 16-byte "
                 "aligned");
  const Args a{out.data(), in.data_as<const __nv_bfloat16>(), weight.data_as<const uint8_t>(),
               weight_scale.data_as<const float>(), bias.defined() ? bias.data() : nullptr,
               bias.defined() ? dt(bias) : 0, static_cast<int>(T), static_cast<int>(N), static_cast<int>(K),
               out.dtype() == DType::kF32};
  const dim3 grid(static_cast<unsigned>(N / 16)), block(kWarps * 32);
  if (T <= 8) launch_pdl(fp8_gemv_mma_kernel<1>, grid, block, 0, s, a);
  else launch_pdl(fp8_gemv_mma_kernel<2>, grid, block, 0, s, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
