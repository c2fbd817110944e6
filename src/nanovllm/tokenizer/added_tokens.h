// Added tokens (tokenizer.json "added_tokens"): found in the text before pre-tokenization, with HF's rules:
// leftmost-longest, non-overlapping matches; single_word rejects a match touching a word character
// (Rust regex \w); lstrip / rstrip swallow the whitespace (Unicode White_Space) to the left / right.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens = true)
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;   // matched on the normalized text (else on the raw input)
  bool single_word = false;
};

struct Segment {
  size_t begin, end;  // byte range in the scanned text
  int32_t id;         // added token id, or -1 for ordinary text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what to look for (already normalized for normalized tokens); `tokens[i]` its token.
  AddedTokenMatcher(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens);

  bool empty() const { return patterns_.empty(); }
  // Splits `text` (valid UTF-8) into ordinary text and added tokens; appends to `out`.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  std::vector<std::string> patterns_;
  std::vector<const AddedToken*> tokens_;
  std::vector<std::vector<uint32_t>> by_first_byte_;  // [256] pattern indices, longest first
};

}  // namespace nanovllm::tokenizer
