// ops::linear_fp8 and ops::linear_fp8_silu on CUDA (fp8_linear.h): up to kFp8GemvMaxTokens rows through the
// weight-streaming GEMV with the bf16 activations, up to kFp8MmaGemvMaxTokens through its tensor-core form
// (fp8_gemv_mma.cu); more rows in chunks: quantize the chunk's activations into a per-context workspace (codes
// [rows, K] + a scale per 128 codes), then the fp8 GEMM: cuBLASLt's block-scaled matmul (scales [K / 128, rows])
// when KernelOptions::fp8_gemm asks for it and it runs the chunk (fp8_gemm_cublaslt_supported: no bias, sm_90,
// K / 128 a multiple of 4, an algorithm offered) for the chunk's rows down to a multiple of 16 (H200: cuBLASLt offers
// no algorithm for 17, 129 or 2730 rows, but does for 1000 and 8192), else and for the rest the mma.sync kernel
// (scales [rows, K / 128]). The
// workspace has one fixed size, allocated at the first call (an eager step: the runner warms up before capturing
// graphs) and never grown, so the decode graphs of batches past kFp8MmaGemvMaxTokens keep valid pointers whatever
// prefill comes later; a chunk is as many rows as it holds. linear_fp8_silu: one token with weights under
// kFp8BulkMinBytes in one kernel (fp8_gemv_gate_up_silu), otherwise linear_fp8 then silu_mul.
#include <algorithm>
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cuda_ops {
namespace {

struct Fp8ActivationsTag {};
// The chunk's e4m3 codes: 1024 rows at K = 32768 (Qwen3-32B's intermediate size is 25600), more at smaller K; a
// chunk of 1024 rows already fills the GPU (N / 128 x 16 CTAs).
constexpr size_t kCodesBytes = size_t{32} << 20;

}  // namespace

void linear_fp8(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                ops::Stream s) {
  const int64_t T = in.dim(0), K = in.dim(1);
  NANOVLLM_CHECK(in.dtype() == DType::kBF16, "linear_fp8 (CUDA): in must be BF16, got ", dtype_name(in.dtype()));
  NANOVLLM_CHECK(out.dtype() == DType::kBF16 || out.dtype() == DType::kF32, "linear_fp8 (CUDA): out must be BF16 or "
                 "F32, got ", dtype_name(out.dtype()));
  if (T == 0) return;
  if (T <= kFp8GemvMaxTokens) {
    fp8_gemv(out, in, weight, weight_scale, bias, s);
    return;
  }
  if (T <= kFp8MmaGemvMaxTokens) {
    fp8_gemv_mma(out, in, weight, weight_scale, bias, s);
    return;
  }
  NANOVLLM_CHECK(static_cast<size_t>(K) <= kCodesBytes, "linear_fp8 (CUDA): in-features ", K, " past the workspace");
  // Chunks of whole 128-row tiles (a multiple of 16 for cuBLASLt), as many as the workspace holds.
  const int64_t chunk_rows = std::max<int64_t>(kCodesBytes / static_cast<size_t>(K) / 128 * 128, 16);
  const int64_t k_blocks = K / kFp8BlockSize;
  WorkspaceCarver size;  // the same total for every K: codes, then a scale per 128 codes
  size.take<uint8_t>(kCodesBytes);
  size.take<float>(kCodesBytes / kFp8BlockSize);
  WorkspaceCarver carve(op_workspace<Fp8ActivationsTag>(size.total(), s));
  uint8_t* codes = carve.take<uint8_t>(kCodesBytes);                    // [chunk_rows, K]
  float* scales = carve.take<float>(kCodesBytes / kFp8BlockSize);       // chunk_rows x K / 128
  const bool try_cublaslt = context_of(s).options.fp8_gemm == Fp8Gemm::kCublasLt && !bias.defined();
  for (int64_t r0 = 0; r0 < T;) {
    int64_t n = std::min(chunk_rows, T - r0);
    const auto rows = [&](int64_t count) {
      return std::pair{out.slice_rows(r0, r0 + count), in.slice_rows(r0, r0 + count)};
    };
    const int64_t n16 = n / 16 * 16;  // cuBLASLt's part
    if (try_cublaslt && n16 > 0) {
      const auto [chunk_out, chunk_in] = rows(n16);
      const TensorView chunk_codes(codes, DType::kF8E4M3, Shape{n16, K}, in.device());
      const TensorView k_major_scales(scales, DType::kF32, Shape{k_blocks, n16}, in.device());
      if (fp8_gemm_cublaslt_supported(chunk_out, chunk_codes, k_major_scales, weight, weight_scale, s)) {
        fp8_quantize_activations(chunk_codes, k_major_scales, chunk_in, s, Fp8ScaleLayout::kKBlockMajor);
        fp8_gemm_cublaslt(chunk_out, chunk_codes, k_major_scales, weight, weight_scale, s);
        r0 += n16;
        continue;  // the chunk's last n - n16 rows start the next one
      }
    }
    const auto [chunk_out, chunk_in] = rows(n);
    const TensorView chunk_codes(codes, DType::kF8E4M3, Shape{n, K}, in.device());
    const TensorView row_major_scales(scales, DType::kF32, Shape{n, k_blocks}, in.device());
    fp8_quantize_activations(chunk_codes, row_major_scales, chunk_in, s);
    fp8_gemm(chunk_out, chunk_codes, row_major_scales, weight, weight_scale, bias, s);
    r0 += n;
  }
}

void linear_fp8_silu(TensorView act, TensorView in, TensorView weight, TensorView weight_scale, TensorView gate_up,
                     ops::Stream s) {
  if (in.dim(0) == 0) return;
  // Fused where fp8_gemv's pick is the register-fed kernel anyway (weights under kFp8BulkMinBytes). H200, bs=1
  // (docs/experiments.md, s43): Qwen3-0.6B 0.733 -> 0.703 ms/token; the 8B shape's gate_up fused on the
  // register-fed kernel tied the bulk-copy kernel + silu_mul (12 layers: 1.202-1.206 vs 1.201-1.202 ms), so that
  // pair stays there.
  const int64_t N = weight.dim(0), K = weight.dim(1);
  if (in.dim(0) <= kFp8GemvMaxTokens && in.dtype() == DType::kBF16 && act.dtype() == DType::kBF16 &&
      gate_up.dtype() == DType::kBF16 && fp8_gemv_default_config(N, K, context_of(s)).unit_k == 0) {
    fp8_gemv_gate_up_silu(act, in, weight, weight_scale, s);
    return;
  }
  cuda_ops::linear_fp8(gate_up, in, weight, weight_scale, TensorView(), s);
  cuda_ops::silu_mul(act, gate_up, s);
}

}  // namespace nanovllm::cuda_ops
