// The fp8 weight-streaming GEMV of decode-sized batches (fp8_linear.h): out[T, N] = x[T, K] @ dequant(W)^T,
// x bf16, W e4m3 [N, K] with f32 scales per 128 x 128 block, fp32 accumulation. At T <= 4 the op is a stream
// over W (N K bytes, half of bf16's), so the design keeps loads in flight and the per-byte work small:
//   * A warp owns kRows consecutive weight rows (inside one 128-row block: one scale per 128 columns) and a
//     strided share of K: per step each lane loads 16 codes (16 bytes) of each row, 512 columns per warp step.
//     The CTA's 8 warps are (8 / k_slices) row groups x k_slices K shares, summed through shared memory in a
//     fixed order (deterministic).
//   * Codes become f32 with integer ops alone: an e4m3 code's exponent and mantissa bits placed in an f32's give
//     its value times 2^-120 exactly, e4m3 subnormals included (they land on f32 subnormals, which the FMAs keep:
//     no flush to zero in this build). The 2^120 goes back in with the block scale. (NaN codes, which no
//     quantizer writes, would read as 480.)
//   * Each lane's 16 columns lie in one 128-column block: it sums them for every token in fp32, then adds the
//     sum times 2^120 times the block's scale to its accumulator.
//   * x (T K bf16, a few KB) is read through L1; W bypasses it. Tokens past T reread row T - 1 and are not
//     stored. Before waiting for its predecessor (PDL), each warp asks L2 for its first step of weights.
#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kWarps = 8;
constexpr int kStepCols = 32 * 16;  // columns per warp step: 32 lanes x 16 codes
constexpr float kTwoPow120 = 0x1p120f;

// Four e4m3 codes (one word, code i in byte i) as f32 values times 2^-120: sign to bit 31, the 7 exponent and
// mantissa bits to bits 26..20 (an arithmetic shift by 4 puts them there and the mask drops the sign copies).
__device__ __forceinline__ void e4m3x4_times_2pow_minus120(uint32_t v, float* f) {
  constexpr uint32_t kMask = 0x87f00000u;
  f[0] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v << 24) >> 4) & kMask);
  f[1] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v << 16) >> 4) & kMask);
  f[2] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v << 8) >> 4) & kMask);
  f[3] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v) >> 4) & kMask);
}

// Eight bf16 (one 16-byte vector) as f32: a bf16 is the top half of an f32.
__device__ __forceinline__ void bf16x8_as_f32(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// kT: tokens computed (T <= kT; the others reread row T - 1); kRows: weight rows per warp (divides 128).
// Grid: N / (kRows * 8 / k_slices) CTAs of 8 warps.
// x [T, K] bf16; w [N, K] e4m3; w_scale [N / 128, K / 128]; bias [N] (any float dtype) or null; out [T, N].
template <int kT, int kRows>
__global__ void __launch_bounds__(kWarps * 32)
fp8_gemv_kernel(void* __restrict__ out, bool out_f32, const uint16_t* __restrict__ x, int T,
                const uint8_t* __restrict__ w, const float* __restrict__ w_scale, const void* __restrict__ bias,
                int bias_dt, int N, int K, int k_slices) {
  static_assert(kRows * kT <= 32, "one lane per (row, token) output");
  __shared__ float partial[kWarps][kRows][kT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slice = warp % k_slices, group = warp / k_slices;
  const int n0 = (blockIdx.x * (kWarps / k_slices) + group) * kRows;
  const int k_blocks = K / 128;
  const float* scale_row = w_scale + int64_t{n0 / 128} * k_blocks;
  const uint8_t* w_rows = w + int64_t{n0} * K;

  if (lane < kRows && slice * kStepCols < K) {  // PDL prologue: the warp's first step of each row into L2
    const int k0 = slice * kStepCols;
    prefetch_l2_bulk(w_rows + int64_t{lane} * K + k0, static_cast<unsigned>(min(kStepCols, K - k0)));
  }
  pdl_wait();  // x is the preceding kernel's output
  pdl_trigger();

  float acc[kRows][kT] = {};
  const int steps = (K + kStepCols - 1) / kStepCols;
  for (int step = slice; step < steps; step += k_slices) {
    const int k = step * kStepCols + lane * 16;
    if (k >= K) continue;  // the last step's idle lanes (K % 512 != 0)
    uint4 codes[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      codes[r] = gemv_detail::ld_weight(reinterpret_cast<const uint4*>(w_rows + int64_t{r} * K + k));
    float xs[kT][16];
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const uint4* row = reinterpret_cast<const uint4*>(x + int64_t{min(t, T - 1)} * K + k);
      bf16x8_as_f32(__ldg(row), xs[t]);
      bf16x8_as_f32(__ldg(row + 1), xs[t] + 8);
    }
    const float scale = scale_row[k / 128];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float ws[16];
      const uint32_t words[4] = {codes[r].x, codes[r].y, codes[r].z, codes[r].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) e4m3x4_times_2pow_minus120(words[i], ws + 4 * i);
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) sum = fmaf(ws[i], xs[t][i], sum);
        acc[r][t] = fmaf(sum * kTwoPow120, scale, acc[r][t]);  // 2^120 first: the product cannot overflow
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) partial[warp][r][t] = v;
    }
  __syncthreads();
  if (slice != 0 || lane >= kRows * kT) return;
  const int r = lane / kT, t = lane % kT;
  if (t >= T) return;
  float v = 0.0f;
  for (int j = 0; j < k_slices; ++j) v += partial[warp + j][r][t];  // the row group's slices, in order
  const int64_t n = n0 + r;
  if (bias != nullptr) v += load_f32(bias, bias_dt, n);
  if (out_f32) {
    static_cast<float*>(out)[int64_t{t} * N + n] = v;
  } else {
    static_cast<__nv_bfloat16*>(out)[int64_t{t} * N + n] = __float2bfloat16_rn(v);
  }
}

template <int kT, int kRows>
void launch(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias, ops::Stream s) {
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  const int64_t steps = (K + kStepCols - 1) / kStepCols;
  // Split K over more warps of a row group until the grid has two CTAs per SM (short weights want every SM).
  const int64_t want = 2 * int64_t{context_of(s).sm_count()};
  int k_slices = 1;
  while (k_slices < kWarps && 2 * k_slices <= steps && N / (int64_t{kWarps / k_slices} * kRows) < want) k_slices *= 2;
  const int64_t rows_per_cta = int64_t{kWarps / k_slices} * kRows;  // divides 128, hence N
  launch_pdl(fp8_gemv_kernel<kT, kRows>, dim3(static_cast<unsigned>(N / rows_per_cta)), dim3(kWarps * 32), 0, s,
             out.data(), out.dtype() == DType::kF32, in.data_as<const uint16_t>(), static_cast<int>(T),
             weight.data_as<const uint8_t>(), weight_scale.data_as<const float>(),
             bias.defined() ? bias.data() : nullptr, bias.defined() ? dt(bias) : 0, static_cast<int>(N),
             static_cast<int>(K), k_slices);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_gemv(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
              ops::Stream s) {
  const int64_t T = in.dim(0);
  NANOVLLM_CHECK(T >= 1 && T <= kFp8GemvMaxTokens, "fp8_gemv: ", T, " rows; 1 to ", kFp8GemvMaxTokens, " supported");
  NANOVLLM_CHECK(in.dtype() == DType::kBF16 && (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32),
                 "fp8_gemv: in must be BF16 and out BF16 or F32, got ", dtype_name(in.dtype()), " and ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(aligned16(in.data()) && aligned16(weight.data()), "fp8_gemv: in and weight must be 16-byte aligned");
  if (T == 1) {
    launch<1, 4>(out, in, weight, weight_scale, bias, s);
  } else if (T == 2) {
    launch<2, 4>(out, in, weight, weight_scale, bias, s);
  } else {
    launch<4, 2>(out, in, weight, weight_scale, bias, s);
  }
}

}  // namespace nanovllm::cuda_ops
