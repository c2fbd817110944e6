// Skinny GEMM for decode-sized batches (T <= kGemvMaxTokens): out[T, N] = in[T, K] @ W[N, K]^T (+ bias[N]),
// bf16 in and weights, fp32 accumulation, bf16 or f32 out. Weight-streaming design, see gemv.cu.
// Plain C++ declarations (no device code) so host tests and benchmarks can include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

class DeviceContext;

// cuda_ops::linear sends T <= this through gemv (when gemv_supported); larger T goes to cuBLASLt.
// Measured threshold: see docs in gemv.cu / the CudaGemvBench.DISABLED_Shapes benchmark.
inline constexpr int64_t kGemvMaxTokens = 16;

// True when gemv can run these tensors: in/weight BF16, out BF16 or F32, 1 <= T <= kGemvMaxTokens,
// K % 8 == 0, in/weight 16-byte aligned. Bias (any float dtype) is always supported.
bool gemv_supported(TensorView out, TensorView in, TensorView weight);

struct GemvConfig;

// Requires gemv_supported. Deterministic (fixed summation order for given shapes, config and device).
// cfg: a launch shape from gemv_candidates (nullptr: the default pick).
void gemv(TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s,
          const GemvConfig* cfg = nullptr);

// out[T, N] = (silu(gate_up[:, :K]) * gate_up[:, K:]) @ W[N, K]^T with the activation rounded to bf16 as
// silu_mul stores it: bitwise equal to silu_mul followed by gemv with the same config.
// gate_up [T, 2K] BF16, weight [N, K] BF16, out BF16/F32.
bool gemv_silu_supported(TensorView out, TensorView gate_up, TensorView weight);
void gemv_silu(TensorView out, TensorView gate_up, TensorView weight, ops::Stream s, const GemvConfig* cfg = nullptr);

// act[T, I] = silu(gate) * up of [gate | up] = in[T, K] @ W[2I, K]^T (W = [gate rows; up rows]): the MLP's
// gate_up projection with silu_mul in its epilogue, bitwise equal to gemv with the same config followed
// by silu_mul. act BF16, I % 16 == 0; cfg: one of gemv_gate_up_silu_candidates (nullptr: the first).
bool gemv_gate_up_silu_supported(TensorView act, TensorView in, TensorView weight);
void gemv_gate_up_silu(TensorView act, TensorView in, TensorView weight, ops::Stream s,
                       const GemvConfig* cfg = nullptr);

// The cuBLASLt path of cuda_ops::linear, whatever T is (benchmarks compare the two).
void linear_cublaslt(TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s);
// Benchmark: the same matmul (no bias) with cuBLASLt's heuristic algorithm of this rank (0 = its first
// choice); false when the heuristic offers fewer. desc (optional): the algorithm's tile, split-K,
// reduction scheme, stages and workspace.
bool linear_cublaslt_ranked(TensorView out, TensorView in, TensorView weight, int rank, ops::Stream s,
                            std::string* desc = nullptr);

// Launch shape gemv picks (exposed for the benchmark printout and tests of the split-K path).
struct GemvConfig {
  int rows_tiles_per_cta = 1;  // RT: 16-row tiles per CTA; the CTA's 8 warps are RT x (8 / RT) (rows x K)
  int k_split = 1;             // CTAs along K per row group (> 1: fp32 partials + last-CTA reduction)
  int ctas = 0;                // total CTAs
  int stream_steps = 0;        // > 0: stream-K kernel (gemv_stream.cuh), this many 128-k steps per warp
  int bulk_units = 0;          // > 0: bulk-copy kernel (gemv_bulk.cuh, sm_90), this many 16-row x 1024-k units per CTA
  bool operator==(const GemvConfig&) const = default;  // the same launch shape
};
GemvConfig gemv_config(int64_t T, int64_t N, int64_t K, DeviceContext& ctx);
// Tests: the default pick with row_tiles (1, 2, 4 or 8; else the pick's) 16-row tiles per CTA and a forced
// K split (k_split > 0, clamped to what the workspace allows).
GemvConfig gemv_forced_config(int64_t T, int64_t N, int64_t K, DeviceContext& ctx, int row_tiles, int k_split);
// The stream-K launch (gemv_stream.cuh) with steps_per_warp 128-k steps per warp (raised until its partial
// slots fit the workspace).
GemvConfig gemv_stream_config(int64_t T, int64_t N, int64_t K, int64_t steps_per_warp);
// Distinct launch shapes worth timing for this problem (the picks for 1, 2, 4 and 8 waves of CTAs,
// stream-K with 1, 2 and 4 times the fewest steps per warp that fit one wave, and on sm_90 the bulk-copy
// kernel with one and two CTAs per SM for weights under 16 MiB, one up to 64 MiB, and with whole 16-row
// tiles per CTA for K <= 3072); the linear dispatch times them at a shape's first use and keeps the
// fastest. silu: shapes for gemv_silu (the bulk kernel only where its staged activation, T x K bf16, fits). one_per_sm: only the bulk kernel's one-wave shape
// where it can run (a projection the decode attention follows, see gemv.cu).
std::vector<GemvConfig> gemv_candidates(int64_t T, int64_t N, int64_t K, DeviceContext& ctx, bool silu = false,
                                        bool one_per_sm = false);
// gemv_gate_up_silu's launch shapes for W [N, K]: the register-fed kernel with RT 8, 4 and 2 and no K split
// (each CTA holds RT / 2 gate tiles and their up tiles).
std::vector<GemvConfig> gemv_gate_up_silu_candidates(int64_t N);
// The bulk-copy launch with `units_per_cta` (raised until the partial slots fit the workspace).
GemvConfig gemv_bulk_config(int64_t N, int64_t K, int64_t units_per_cta);
// True when the bulk-copy kernel can run on this device (sm_90+ and built for it).
bool gemv_bulk_available(DeviceContext& ctx);

// The device context's split workspace (fp32 partials and per-tile arrival counters, zero between launches),
// for other kernels that finish tiles like the bulk-copy gemv (fp8_gemv_bulk.cu). One stream at a time.
struct GemvSplitWorkspace {
  float* ws = nullptr;
  size_t ws_bytes = 0;
  unsigned* counters_data = nullptr;
  int64_t counters = 0;  // entries of counters_data
};
GemvSplitWorkspace gemv_split_workspace(DeviceContext& ctx);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
