// Token bitmasks (structured outputs): every logit whose token is not allowed becomes -inf. The CPU
// reference of kernels/cuda/token_bitmask.cu; the CPU sampler's masking.
#pragma once

#include <cstdint>

namespace nanovllm::cpu {

// logits: [num_rows, vocab] f32, rows `row_stride` floats apart; bitmask: [num_masks, (vocab + 31) / 32] u32;
// rows: [num_masks] the logits row of each mask (mask m applies to row rows[m]). Bit (t % 32) of word t / 32
// set = token t allowed.
void apply_token_bitmask(float* logits, int64_t row_stride, int64_t vocab, const uint32_t* bitmask,
                         const int32_t* rows, int64_t num_masks);

}  // namespace nanovllm::cpu
