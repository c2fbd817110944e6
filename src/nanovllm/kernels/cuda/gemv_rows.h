// Row-stream gemv (sm_90) for bs = 1-2 decode: out[T, N] = in[T, K] @ W[N, K]^T, bf16 in and weights,
// fp32 accumulation, bf16 or f32 out, no bias. Each CTA owns a contiguous range of whole weight rows, so
// its share of W is one contiguous region of memory, streamed front to back in large bulk copies; see
// gemv_rows.cu. Plain C++ declarations (no device code) so host tests and benchmarks can include it.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// Its consumers convert and multiply every weight vector once per token: at T = 4 it ran 2-4x slower
// than the other kernels on an H200 (session 13), so it stops at 2.
inline constexpr int64_t kGemvRowsMaxTokens = 2;

// Tests and benchmarks: puts gemv_rows into cuda_ops::linear's candidates or takes it out (call
// linear_clear_choices() too); returns the previous setting (at startup: NANOVLLM_GEMV_ROWS == "1", see
// linear.cu).
bool gemv_rows_set_in_dispatch(bool on);

struct GemvRowsConfig {
  int ctas = 0;             // CTAs, each a contiguous range of rows
  int stage_bytes = 32768;  // bytes per ring stage (a multiple of 2048)
  int stages = 4;           // ring stages (>= 2)
};

// True when gemv_rows can run these tensors: an sm_90 device and build, in / weight BF16, out BF16 or
// F32, 1 <= T <= kGemvRowsMaxTokens, K % 1024 == 0, in / weight 16-byte aligned.
bool gemv_rows_supported(TensorView out, TensorView in, TensorView weight);

// Requires gemv_rows_supported and a config from gemv_rows_candidates. Deterministic.
void gemv_rows(TensorView out, TensorView in, TensorView weight, ops::Stream s, const GemvRowsConfig& cfg);

// One or two CTAs per SM (small_ring: one, with a ring that leaves room for a neighbour CTA), 16 or 32
// KB stages.
std::vector<GemvRowsConfig> gemv_rows_candidates(int64_t T, int64_t N, int64_t K, int device, bool small_ring = false);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
