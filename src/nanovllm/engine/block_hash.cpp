#include "nanovllm/engine/block_hash.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

namespace nanovllm {

uint64_t hash_block(uint64_t prev_hash, bool has_prev, const int32_t* tokens, int64_t n) {
  // One contiguous buffer: prev hash (8 little-endian bytes, absent for block 0) then the int32 tokens.
  thread_local std::vector<unsigned char> buf;
  const size_t head = has_prev ? 8 : 0;
  buf.resize(head + static_cast<size_t>(n) * sizeof(int32_t));
  for (size_t i = 0; i < head; ++i) buf[i] = static_cast<unsigned char>(prev_hash >> (8 * i));
  std::memcpy(buf.data() + head, tokens, static_cast<size_t>(n) * sizeof(int32_t));
  return XXH64(buf.data(), buf.size(), 0);
}

}  // namespace nanovllm
