// Pre-tokenizer "Split" with behavior "Isolated": every regex match is a piece, and so is every gap between
// matches. PCRE2 with UTF + UCP and the JIT compiler.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::tokenizer {

class RegexSplitter {
 public:
  // `pattern` is an Oniguruma/Rust-style regex as written in tokenizer.json.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` (valid UTF-8) to `out`, in order; together they cover `text`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// tokenizer.json's regexes come from HF tokenizers, where \s means the Unicode White_Space property.
// PCRE2's UCP \s also takes U+180E and a few others, so \s and \S are rewritten to explicit classes.
std::string translate_regex(const std::string& pattern);

// The regex ByteLevel(use_regex = true) splits with (GPT-2's).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace nanovllm::tokenizer
