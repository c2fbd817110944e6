#include "nanovllm/kernels/cpu/token_bitmask.h"

#include <limits>

namespace nanovllm::cpu {

void apply_token_bitmask(float* logits, int64_t row_stride, int64_t vocab, const uint32_t* bitmask,
                         const int32_t* rows, int64_t num_masks) {
  const int64_t words = (vocab + 31) / 32;
  for (int64_t m = 0; m < num_masks; ++m) {
    float* row = logits + static_cast<int64_t>(rows[m]) * row_stride;
    const uint32_t* mask = bitmask + m * words;
    for (int64_t t = 0; t < vocab; ++t)
      if (!((mask[t >> 5] >> (t & 31)) & 1u)) row[t] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace nanovllm::cpu
