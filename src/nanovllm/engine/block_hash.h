// The prefix cache's chained block hash, in one place for every party that must agree on it
// (Sequence computes it, BlockManager keys its cache on it, tests check it):
//   h_0 = XXH64(tokens_0), h_i = XXH64(h_{i-1} as 8 little-endian bytes ‖ tokens_i as int32), seed 0,
// so a hash names a block's tokens AND everything before them. A sequence with a cache salt (Sequence::cache_salt)
// starts from h_0 = XXH64(salt as 8 little-endian bytes ‖ tokens_0): its blocks match only those of the same salt.
#pragma once

#include <cstdint>

namespace nanovllm {

// The hash of the n tokens at `tokens` following a block whose hash is prev_hash (has_prev false: the
// first block, prev_hash unused).
uint64_t hash_block(uint64_t prev_hash, bool has_prev, const int32_t* tokens, int64_t n);

}  // namespace nanovllm
