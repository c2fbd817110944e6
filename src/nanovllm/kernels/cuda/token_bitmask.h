// Token bitmasks on the device (structured outputs): logits of tokens a request's grammar does not allow
// become -inf before sampling. CPU reference: kernels/cpu/token_bitmask.h (same arguments).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace nanovllm::cuda_ops {

// logits: [rows, vocab] f32 device, rows `row_stride` floats apart; bitmask: [num_masks, (vocab + 31) / 32]
// u32 device; rows: [num_masks] i32 device, the logits row each mask applies to (distinct). Bit (t % 32) of
// word t / 32 set = token t allowed. num_masks <= 65535.
void apply_token_bitmask(float* logits, int64_t row_stride, int64_t vocab, const uint32_t* bitmask,
                         const int32_t* rows, int64_t num_masks, cudaStream_t stream);

}  // namespace nanovllm::cuda_ops
