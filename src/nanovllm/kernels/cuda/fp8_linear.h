// Block-scaled fp8 projections on CUDA (ops::linear_fp8; docs/fp8.md): a weight-streaming GEMV for decode-sized
// batches and, for more rows, activation quantization (1 x 128 groups) plus an fp8 tensor-core GEMM: cuBLASLt's
// block-scaled fp8 matmul (sm_90) or our mma.sync kernel (KernelOptions::fp8_gemm picks; the other one where the
// first cannot run). Weights [N, K] e4m3 with f32 block scales [N / 128, K / 128]; N and K multiples of 128
// (ops.cpp checks). Plain C++ declarations (no device code) so host tests include it.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

class DeviceContext;

// The fp8 GEMM runs mma.sync e4m3 (sm_89+); this build's kernels target sm_90 for it.
bool fp8_tensor_cores_available(const DeviceContext& ctx);

// A launch shape of fp8_gemv: the register-fed kernel (fp8_gemv.cu; unit_k == 0: each lane streams 16 weight
// codes at a time through registers) or the bulk-copy ring kernel (fp8_gemv_bulk.cu, sm_90): units of 16 rows x
// unit_k codes (1024, 2048 or 4096) copied into shared memory, units_per_cta of them per CTA (ctas CTAs), read by
// consumer_warps (4 or 8) warps.
struct Fp8GemvConfig {
  int unit_k = 0;
  int units_per_cta = 0;
  int ctas = 0;
  int consumer_warps = 4;
  bool operator==(const Fp8GemvConfig&) const = default;
};

// True when the bulk-copy kernel runs on this device (sm_90+ and built for it).
bool fp8_gemv_bulk_available(DeviceContext& ctx);

// The bulk-copy launch for W [N, K] with row pieces of unit_k codes, about ctas_per_sm CTAs per SM and
// consumer_warps consumer warps per CTA.
Fp8GemvConfig fp8_gemv_bulk_config(int64_t N, int64_t K, int unit_k, int ctas_per_sm, DeviceContext& ctx,
                                   int consumer_warps = 4);

// fp8_gemv's pick (cfg == nullptr), from CudaFp8Bench.DISABLED_DecodeShapes on the H200 (s38 call 2): weights of
// kFp8BulkMinBytes or more take the bulk-copy kernel with 2 KB row pieces and 8 consumer warps, two CTAs per SM
// (8B gate_up 28.6 us, down 14.5, o 5.6 against 30.4 / 15.9 / 6.1 register-fed) unless that cuts the CTAs' ranges
// inside row tiles, then one per SM (8B qkv: 8.3 us against 10.1 split, 9.9 register-fed). Smaller weights take
// the register-fed kernel (Qwen3-0.6B's o and down: 2.0 / 2.6 us against the best bulk shape's 2.2 / 3.0), as
// does every device without the bulk kernel.
inline constexpr int64_t kFp8BulkMinBytes = int64_t{16} << 20;
Fp8GemvConfig fp8_gemv_default_config(int64_t N, int64_t K, DeviceContext& ctx);

// out [T, N] (BF16 / F32) = in [T, K] BF16 @ dequant(weight)^T (+ bias [N]), T <= kFp8GemvMaxTokens: the codes
// turned into f32 exactly and accumulated in fp32 per 16 codes before the block scale; deterministic for a given
// launch shape. in and weight 16-byte aligned. Layouts: the register-fed kernel takes N and K multiples of 128
// (weight_scale [N / 128, K / 128], what ops::linear_fp8 allows); the bulk-copy kernel any N >= 1 and K a multiple
// of 16 (weight_scale [ceil(N / 128), ceil(K / 128)]). cfg: a launch shape (nullptr: fp8_gemv_default_config).
void fp8_gemv(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
              ops::Stream s, const Fp8GemvConfig* cfg = nullptr);

// act [T, I] BF16 = silu(gate) * up of in [T, K] BF16 @ dequant(weight)^T, weight [gate; up] [2I, K] F8E4M3 (I and
// K multiples of 128), T <= kFp8GemvMaxTokens: the register-fed kernel with gate and up rows in one CTA (K split
// over at most 4 of its 8 warps), each value rounded to bf16 before the activation — bit for bit fp8_gemv's
// register-fed launch followed by silu_mul wherever that launch splits K no further.
void fp8_gemv_gate_up_silu(TensorView act, TensorView in, TensorView weight, TensorView weight_scale, ops::Stream s);

// The bulk-copy kernel with launch shape c (c.unit_k > 0): fp8_gemv's checks already made.
void fp8_gemv_bulk(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                   ops::Stream s, const Fp8GemvConfig& c);

// fp8_gemv's contract for 1 <= T <= kFp8MmaGemvMaxTokens on the bf16 tensor cores (fp8_gemv_mma.cu): the codes'
// exact values, fp32 sums per 128-column block times its scale; N and K multiples of 128; deterministic.
void fp8_gemv_mma(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                  ops::Stream s);

// Where fp8_quantize_activations puts the scale of row t's k block b: kRowMajor scales [T, K / 128] (t * K / 128
// + b; the mma.sync GEMM's), kKBlockMajor scales [K / 128, T] (b * T + t; cuBLASLt's VEC128_32F layout, rows
// fastest).
enum class Fp8ScaleLayout { kRowMajor, kKBlockMajor };

// codes [T, K] F8E4M3, scales F32 (`layout`) = in [T, K] BF16 quantized per row and 128 columns: scale =
// max |x| / 448 (1 for an all-zero group), code = e4m3(x / scale) rounded to nearest even — bit for bit what
// cpu::linear_fp8_quantized computes.
void fp8_quantize_activations(TensorView codes, TensorView scales, TensorView in, ops::Stream s,
                              Fp8ScaleLayout layout = Fp8ScaleLayout::kRowMajor);

// out [T, N] (BF16 / F32) = sum over 128-column blocks b of (codes x weight codes over b) * scales[t, b] *
// weight_scale[n / 128, b] (+ bias): mma.sync m16n8k32 e4m3 with an fp32 accumulator per block. sm_89+.
void fp8_gemm(TensorView out, TensorView codes, TensorView scales, TensorView weight, TensorView weight_scale,
              TensorView bias, ops::Stream s);

// Whether cuBLASLt's block-scaled fp8 matmul runs out [M, N] (BF16 / F32) = codes [M, K] x weight [N, K]^T here
// (scales [K / 128, M], weight_scale [N / 128, K / 128]: the buffers fp8_gemm_cublaslt will get): an sm_90
// device, N and K multiples of 128, K / 128 a multiple of 4 (cuBLASLt reads the weight scales' rows with a
// stride rounded up to 4 blocks; ours are unpadded, which agrees only then: every Qwen3 size), 16-byte aligned
// buffers, and cuBLASLt offered an algorithm for this M, N, K, output dtype and the pointers' alignments (asked
// once per such key and cached; one it refuses is logged once as a warning: the caller runs fp8_gemm instead).
bool fp8_gemm_cublaslt_supported(TensorView out, TensorView codes, TensorView scales, TensorView weight,
                                 TensorView weight_scale, ops::Stream s);

// out [M, N] = the same sum as fp8_gemm, by cuBLASLt: the weight as matrix A with BLK128x128_32F scales
// (weight_scale [N / 128, K / 128] as it is), the codes as B with VEC128_32F scales [K / 128, M]
// (Fp8ScaleLayout::kKBlockMajor), fp32 compute, no bias. Fails (NANOVLLM_CHECK) where
// fp8_gemm_cublaslt_supported is false.
void fp8_gemm_cublaslt(TensorView out, TensorView codes, TensorView scales, TensorView weight, TensorView weight_scale,
                       ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
