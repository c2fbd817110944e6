// One thread per logit: the 32 threads of a warp read one mask word (a broadcast) and write their own
// logits, so the writes coalesce; allowed tokens are not written at all.
#include <cmath>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/token_bitmask.h"

namespace nanovllm::cuda_ops {
namespace {

__global__ void apply_token_bitmask_kernel(float* __restrict__ logits, int64_t row_stride, int32_t vocab,
                                           const uint32_t* __restrict__ bitmask, const int32_t* __restrict__ rows,
                                           int32_t words) {
  const int32_t mask = static_cast<int32_t>(blockIdx.y);
  const int32_t t = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= vocab) return;
  const uint32_t w = bitmask[static_cast<int64_t>(mask) * words + (t >> 5)];
  if (!((w >> (t & 31)) & 1u)) logits[static_cast<int64_t>(rows[mask]) * row_stride + t] = -INFINITY;
}

}  // namespace

void apply_token_bitmask(float* logits, int64_t row_stride, int64_t vocab, const uint32_t* bitmask,
                         const int32_t* rows, int64_t num_masks, cudaStream_t stream) {
  if (num_masks == 0 || vocab == 0) return;
  NANOVLLM_CHECK(num_masks <= 65535 && vocab < (int64_t{1} << 31), "apply_token_bitmask: ", num_masks,
                 " masks of vocab ", vocab, " exceed the launch limits");
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>((vocab + kThreads - 1) / kThreads), static_cast<unsigned>(num_masks));
  apply_token_bitmask_kernel<<<grid, kThreads, 0, stream>>>(logits, row_stride, static_cast<int32_t>(vocab), bitmask,
                                                             rows, static_cast<int32_t>((vocab + 31) / 32));
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
