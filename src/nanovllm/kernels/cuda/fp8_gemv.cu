// The fp8 weight-streaming GEMV of one-token steps (fp8_linear.h): out[T, N] = x[T, K] @ dequant(W)^T,
// x bf16, W e4m3 [N, K] with f32 scales per 128 x 128 block, fp32 accumulation. At T = 1 the op is a stream
// over W (N K bytes, half of bf16's), so the design keeps loads in flight and the per-byte work small (the kernels
// take kT tokens, but only one wins: from 2 rows fp8_gemv_mma.cu's tensor cores beat the per-token FMAs, H200 s42:
// 8B gate_up at 2 / 4 rows 33.8 / 33.9 us against 34.4 / 58.3; at one row 28.6 against 33.6):
//   * A warp owns kRows consecutive weight rows (inside one 128-row block: one scale per 128 columns) and a
//     strided share of K: per step each lane loads 16 codes (16 bytes) of each row, 512 columns per warp step.
//     The CTA's 8 warps are (8 / k_slices) row groups x k_slices K shares, summed through shared memory in a
//     fixed order (deterministic).
//   * Codes become f32 with integer ops alone (fp8_gemv_device.cuh: exact, times 2^-120, which the block scale
//     puts back). Each lane's 16 columns lie in one 128-column block: it sums them for every token in fp32,
//     then adds the sum times 2^120 times the block's scale to its accumulator.
//   * x (T K bf16, a few KB) is read through L1; W bypasses it. Tokens past T reread row T - 1 and are not
//     stored. Before waiting for its predecessor (PDL), each warp asks L2 for its first step of weights.
// fp8_gemv dispatches between this kernel and the bulk-copy one (fp8_gemv_bulk.cu: more bytes in flight per SM,
// sm_90): see fp8_gemv_default_config. fp8_gemv_gate_up_silu runs this kernel with each CTA's gate rows and the
// matching up rows, storing silu(gate) * up (the MLP's gate_up projection and silu_mul in one launch).
#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_gemv_device.cuh"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"
#include "nanovllm/kernels/cuda/per_device_flag.h"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cuda_ops {
namespace {

using namespace fp8_gemv_detail;
constexpr int kWarps = 8;
constexpr int kStepCols = 32 * 16;  // columns per warp step: 32 lanes x 16 codes
// kT: tokens computed (T <= kT; the others reread row T - 1); kRows: weight rows per warp (divides 128).
// Grid: N / (kRows * 8 / k_slices) CTAs of 8 warps.
// x [T, K] bf16; w [N, K] e4m3; w_scale [N / 128, K / 128]; bias [N] (any float dtype) or null; out [T, N].
// kSiluOut (gemv_gate_up_silu): W = [gate; up] (N = 2I, I a multiple of 128), out [T, I] bf16 = silu(gate) * up,
// each rounded to bf16 first (what the projection and silu_mul store apart); no bias. The CTA's first half of row
// groups take gate rows, the second half the matching up rows (k_slices <= 4: two groups at least).
template <int kT, int kRows, bool kSiluOut = false>
__global__ void __launch_bounds__(kWarps * 32)
fp8_gemv_kernel(void* __restrict__ out, bool out_f32, const uint16_t* __restrict__ x, int T,
                const uint8_t* __restrict__ w, const float* __restrict__ w_scale, const void* __restrict__ bias,
                int bias_dt, int N, int K, int k_slices) {
  static_assert(kRows * kT <= 32, "one lane per (row, token) output");
  __shared__ float partial[kWarps][kRows][kT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slice = warp % k_slices, group = warp / k_slices, groups = kWarps / k_slices;
  int n0 = (blockIdx.x * groups + group) * kRows;
  if constexpr (kSiluOut) {  // gate rows of group g < groups / 2, up rows (I further) for the others
    const int half = groups / 2;
    n0 = (group / half) * (N / 2) + (blockIdx.x * half + group % half) * kRows;
  }
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
    load_x16<kT>(x, T, K, k, xs);
    const float scale = scale_row[k / 128];
#pragma unroll
    for (int r = 0; r < kRows; ++r) fp8x16_dot_add<kT>(codes[r], xs, scale, acc[r]);
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
  if constexpr (kSiluOut) {
    if (warp >= kWarps / 2) return;  // up rows: their gate row's lane reads them
    float u = 0.0f;
    for (int j = 0; j < k_slices; ++j) u += partial[warp + kWarps / 2 + j][r][t];  // the matching up group
    const float g = __bfloat162float(__float2bfloat16_rn(v)), up = __bfloat162float(__float2bfloat16_rn(u));
    static_cast<__nv_bfloat16*>(out)[int64_t{t} * (N / 2) + n] = __float2bfloat16_rn(gemv_detail::silu(g) * up);
    return;
  }
  if (bias != nullptr) v += load_f32(bias, bias_dt, n);
  if (out_f32) {
    static_cast<float*>(out)[int64_t{t} * N + n] = v;
  } else {
    static_cast<__nv_bfloat16*>(out)[int64_t{t} * N + n] = __float2bfloat16_rn(v);
  }
}

template <int kT, int kRows, bool kSiluOut = false>
void launch(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias, ops::Stream s) {
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  const int64_t steps = (K + kStepCols - 1) / kStepCols;
  // Split K over more warps of a row group until the grid has two CTAs per SM (short weights want every SM);
  // kSiluOut keeps two row groups (a gate and an up one).
  static PerDeviceFlag carveout_set;
  once_per_current_device(carveout_set, [] { prefer_max_shared_carveout(fp8_gemv_kernel<kT, kRows, kSiluOut>); });
  const int64_t want = 2 * int64_t{context_of(s).sm_count()};
  const int max_slices = kSiluOut ? kWarps / 2 : kWarps;
  int k_slices = 1;
  while (k_slices < max_slices && 2 * k_slices <= steps && N / (int64_t{kWarps / k_slices} * kRows) < want)
    k_slices *= 2;
  const int64_t rows_per_cta = int64_t{kWarps / k_slices} * kRows;  // divides 128, hence N (kSiluOut: half, I)
  launch_pdl(fp8_gemv_kernel<kT, kRows, kSiluOut>, dim3(static_cast<unsigned>(N / rows_per_cta)), dim3(kWarps * 32),
             0, s, out.data(), out.dtype() == DType::kF32, in.data_as<const uint16_t>(), static_cast<int>(T),
             weight.data_as<const uint8_t>(), weight_scale.data_as<const float>(),
             bias.defined() ? bias.data() : nullptr, bias.defined() ? dt(bias) : 0, static_cast<int>(N),
             static_cast<int>(K), k_slices);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_gemv(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
              ops::Stream s, const Fp8GemvConfig* cfg) {
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  NANOVLLM_CHECK(T >= 1 && T <= kFp8GemvMaxTokens, "fp8_gemv: ", T, " rows; 1 to ", kFp8GemvMaxTokens, " supported");
  NANOVLLM_CHECK(in.dtype() == DType::kBF16 && (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32),
                 "fp8_gemv: in must be BF16 and out BF16 or F32, got ", dtype_name(in.dtype()), " and ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(weight.dtype() == DType::kF8E4M3 && in.dim(1) == K && out.dim(0) == T && out.dim(1) == N,
                 "fp8_gemv: shapes in ", in.shape().str(), ", weight ", weight.shape().str(), " (F8E4M3), out ",
                 out.shape().str());
  NANOVLLM_CHECK(aligned16(in.data()) && aligned16(weight.data()), "fp8_gemv: in and weight must be 16-byte aligned");
  const Fp8GemvConfig c = cfg != nullptr ? *cfg : fp8_gemv_default_config(N, K, context_of(s));
  if (c.unit_k > 0) {
    fp8_gemv_bulk(out, in, weight, weight_scale, bias, s, c);
    return;
  }
  NANOVLLM_CHECK(N % 128 == 0 && K % 128 == 0, "fp8_gemv (register-fed): N ", N, " and K ", K,
                 " must be multiples of 128");
  static_assert(kFp8GemvMaxTokens == 1, "one token: more take fp8_gemv_mma");
  launch<1, 4>(out, in, weight, weight_scale, bias, s);
}

void fp8_gemv_gate_up_silu(TensorView act, TensorView in, TensorView weight, TensorView weight_scale, ops::Stream s) {
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  NANOVLLM_CHECK(T >= 1 && T <= kFp8GemvMaxTokens, "fp8_gemv_gate_up_silu: ", T, " rows; 1 to ", kFp8GemvMaxTokens,
                 " supported");
  NANOVLLM_CHECK(in.dtype() == DType::kBF16 && act.dtype() == DType::kBF16 && weight.dtype() == DType::kF8E4M3,
                 "fp8_gemv_gate_up_silu: in and act must be BF16 and weight F8E4M3, got ", dtype_name(in.dtype()), ", ",
                 dtype_name(act.dtype()), " and ", dtype_name(weight.dtype()));
  NANOVLLM_CHECK(N % 256 == 0 && K % 128 == 0 && in.dim(1) == K && act.dim(0) == T && act.dim(1) == N / 2,
                 "fp8_gemv_gate_up_silu: shapes in ", in.shape().str(), ", weight ", weight.shape().str(),
                 " (rows a multiple of 256, in-features of 128), act ", act.shape().str());
  NANOVLLM_CHECK(weight_scale.dtype() == DType::kF32 && weight_scale.shape() == Shape({N / 128, K / 128}),
                 "fp8_gemv_gate_up_silu: weight_scale must be F32 [", N / 128, ", ", K / 128, "], got ",
                 weight_scale.shape().str());
  NANOVLLM_CHECK(aligned16(in.data()) && aligned16(weight.data()), "fp8_gemv_gate_up_silu: in and weight must be "
                 "16-byte aligned");
  launch<1, 4, true>(act, in, weight, weight_scale, TensorView(), s);
}

}  // namespace nanovllm::cuda_ops
