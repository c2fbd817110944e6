// Unicode normalizers of tokenizer.json ("NFC", "NFD", "NFKC", "NFKD", or a "Sequence" of them) via utf8proc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::tokenizer {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

class Normalizer {
 public:
  Normalizer() = default;  // identity
  explicit Normalizer(std::vector<NormalForm> steps) : steps_(std::move(steps)) {}

  bool is_identity() const { return steps_.empty(); }
  // `text` must be valid UTF-8. Appends the normalized text to `out`.
  void normalize(std::string_view text, std::string& out) const;

 private:
  std::vector<NormalForm> steps_;
};

// One normal form of valid UTF-8, appended to `out`.
void append_normalized(std::string_view text, NormalForm form, std::string& out);

}  // namespace nanovllm::tokenizer
