#include "nanovllm/engine/sequence.h"

#include "nanovllm/engine/block_hash.h"

namespace nanovllm {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "";
}

void Sequence::own_tokens() {
  if (!shared_prompt) return;
  token_ids.assign(shared_prompt->begin(), shared_prompt->end());
  shared_prompt.reset();
}

void Sequence::reset_block_hashes(int64_t block_size) {
  block_hash_size_ = block_size;
  block_hashes_.clear();
  extend_block_hashes();
}

void Sequence::extend_block_hashes() {
  if (block_hash_size_ <= 0) return;
  const std::span<const int32_t> toks = tokens();
  const int64_t known = num_tokens() - (!toks.empty() && toks.back() == kPendingToken ? 1 : 0);
  for (int64_t i = static_cast<int64_t>(block_hashes_.size()); (i + 1) * block_hash_size_ <= known; ++i) {
    // A salt stands in for a previous block's hash before the first block.
    const uint64_t prev = i > 0 ? block_hashes_.back() : cache_salt;
    const bool has_prev = i > 0 || cache_salt != 0;
    block_hashes_.push_back(hash_block(prev, has_prev, toks.data() + i * block_hash_size_, block_hash_size_));
  }
}

}  // namespace nanovllm
