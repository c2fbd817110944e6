#include "nanovllm/grammar/vocabulary.h"

#include <algorithm>
#include <limits>

#include "nanovllm/core/error.h"

namespace nanovllm::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, const std::vector<int32_t>& excluded,
                                 std::vector<int32_t> stop_ids, int64_t vocab_size)
    : token_bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)), vocab_size_(vocab_size) {
  const auto n = static_cast<int64_t>(token_bytes_.size());
  NANOVLLM_CHECK(vocab_size_ >= n && vocab_size_ > 0, "grammar vocabulary: vocab_size ", vocab_size_,
                 " is smaller than the ", n, " tokens");
  matchable_.assign(token_bytes_.size(), 0);
  for (size_t id = 0; id < token_bytes_.size(); ++id) matchable_[id] = !token_bytes_[id].empty();
  for (int32_t id : excluded)
    if (id >= 0 && id < n) matchable_[static_cast<size_t>(id)] = 0;
  for (int32_t id : stop_ids_)
    NANOVLLM_CHECK(id >= 0 && id < vocab_size_, "grammar vocabulary: stop token id ", id, " is outside [0, ",
                   vocab_size_, ")");
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
  // A stop token ends the match; it is never text (a model's EOS may spell "<|im_end|>").
  for (int32_t id : stop_ids_)
    if (id < n) matchable_[static_cast<size_t>(id)] = 0;
  for (int32_t id = 0; id < n; ++id)
    if (matchable_[static_cast<size_t>(id)]) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[static_cast<size_t>(a)] < token_bytes_[static_cast<size_t>(b)];
  });
  sorted_offset_.assign(1, 0);
  for (int32_t id : sorted_) {
    sorted_text_ += token_bytes_[static_cast<size_t>(id)];
    sorted_offset_.push_back(static_cast<uint32_t>(sorted_text_.size()));
  }
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = token_bytes_[static_cast<size_t>(sorted_[i - 1])];
    const std::string& b = token_bytes_[static_cast<size_t>(sorted_[i])];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<uint16_t>(std::min<size_t>(k, std::numeric_limits<uint16_t>::max()));
  }
}

bool TokenVocabulary::is_stop(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

}  // namespace nanovllm::grammar
