// TokenVocabulary: what the grammar engine knows of a tokenizer — the bytes each token id stands for, the
// ids that never match text (special tokens), the ids that end a match (end of sequence), and the width of
// the model's output (its vocab_size, often larger than the tokenizer's). Tokens are also kept sorted by
// their bytes with each one's common prefix with the one before: walking them in that order, a matcher
// rolls back only to the shared prefix, and a rejected prefix skips every token that starts with it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::grammar {

// Words of a token bitmask: bit (id % 32) of word (id / 32) set = token id allowed.
inline int64_t bitmask_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }
inline void bitmask_set(uint32_t* words, int64_t id) { words[id >> 5] |= 1u << (id & 31); }
inline bool bitmask_test(const uint32_t* words, int64_t id) { return (words[id >> 5] >> (id & 31)) & 1u; }

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes of token id (ids at or past token_bytes.size() and ids listed in `excluded`
  // never match; neither do empty tokens). stop_ids: tokens that end a match when the grammar may end.
  // vocab_size: the model's output width (>= token_bytes.size()).
  TokenVocabulary(std::vector<std::string> token_bytes, const std::vector<int32_t>& excluded,
                  std::vector<int32_t> stop_ids, int64_t vocab_size);

  int64_t vocab_size() const { return vocab_size_; }
  std::string_view bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }
  bool matches_text(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(matchable_.size()) && matchable_[static_cast<size_t>(id)]; }
  bool is_stop(int32_t id) const;
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

  // The matchable tokens sorted by bytes; lcp()[i] = common prefix length of sorted()[i - 1] and sorted()[i];
  // sorted_bytes(i) = bytes(sorted()[i]), stored contiguously in sorted order (walks read memory in order).
  std::span<const int32_t> sorted() const { return sorted_; }
  std::span<const uint16_t> lcp() const { return lcp_; }
  std::string_view sorted_bytes(size_t i) const {
    return {sorted_text_.data() + sorted_offset_[i], sorted_offset_[i + 1] - sorted_offset_[i]};
  }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> matchable_;
  std::vector<int32_t> stop_ids_;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> sorted_;
  std::vector<uint16_t> lcp_;
  std::string sorted_text_;
  std::vector<uint32_t> sorted_offset_;  // [sorted + 1]
};

}  // namespace nanovllm::grammar
