// Hopper (sm_90a) linear for decode-sized batches: out[T, N] = in[T, K] @ W[N, K]^T, bf16 in and
// weights, fp32 accumulation, bf16 or f32 out, no bias. Weight streaming through TMA with the tensor
// cores doing the math, so it stays at the copy rate from T = 1 to a few hundred; see linear_wgmma.cu.
// Plain C++ declarations (no device code) so host tests and benchmarks can include it.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// cuda_ops::linear offers linear_wgmma for T up to this (larger batches are GEMMs for cuBLASLt), when
// NANOVLLM_LINEAR_WGMMA=1 is in the environment (off by default: not faster on an H200, see linear.cu).
inline constexpr int64_t kWgmmaMaxTokens = 256;
// Tests and benchmarks: puts linear_wgmma into cuda_ops::linear's candidates or takes it out (call
// linear_clear_choices() too); returns the previous setting (at startup: NANOVLLM_LINEAR_WGMMA == "1").
bool linear_wgmma_set_in_dispatch(bool on);

struct WgmmaLinearConfig {
  int token_tile = 8;  // tokens per CTA (the wgmma N): 8, 16, 32, 64, 128 or 256
  int warpgroups = 1;  // consumer warpgroups per CTA, 64 weight rows each
  int k_split = 1;     // CTAs of one cluster along K (1, 2, 4 or 8); partial sums merged in shared memory
  int stages = 4;      // ring stages (>= 2)
  int boxes = 1;       // 64-column TMA boxes per stage (1..8): longer contiguous reads of each weight row
  int ctas = 0;        // k_split 1: CTAs looping over the row tiles (0: one per row tile)
};

// The token tile for T tokens: the smallest of 8, 16, ..., 256 that holds T (256 above).
int linear_wgmma_token_tile(int64_t T);

// True when the device runs this kernel's sm_90a code (compute capability 9.0, a build for sm_90a).
bool linear_wgmma_available(int device);

// True when linear_wgmma can run these tensors on the current device: sm_90a code loaded, in / weight
// BF16, out BF16 or F32, K % 8 == 0 (TMA's 16-byte row pitch), in / weight 16-byte aligned.
bool linear_wgmma_supported(TensorView out, TensorView in, TensorView weight);

// Requires linear_wgmma_supported and a config from linear_wgmma_candidates (or one with the same
// fields' ranges). Deterministic: fixed summation order for given shapes and config.
void linear_wgmma(TensorView out, TensorView in, TensorView weight, ops::Stream s, const WgmmaLinearConfig& cfg);

// Launch shapes worth timing for this problem: one or two warpgroups, 1 or 4 boxes per stage, the K splits
// that bring the grid near one or two waves (or, unsplit, as many CTAs as are resident, looping over the
// row tiles), and a ring of about 96 KB (room for a neighbour CTA) or the full shared memory.
// small_ring: only the ~96 KB rings (a projection the decode attention follows, see linear.cu).
std::vector<WgmmaLinearConfig> linear_wgmma_candidates(int64_t T, int64_t N, int64_t K, int device,
                                                       bool small_ring = false);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
