// The haystack text of the "essay" tasks: a corpus of words, as RULER treats its essays (whitespace runs
// collapsed to one space, lengths counted in words), with sentence boundaries for needle insertion and
// the pool of distinct words that common-words extraction draws from. Immutable once built.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::eval {

class Corpus {
 public:
  // The built-in haystack: assets/haystack/kjv.txt, linked into the binary (built once per process).
  static const Corpus& builtin();
  // Any UTF-8 text; `name` is shown in reports. Throws nanovllm::Error when it has too few words.
  Corpus(std::string_view text, std::string name);
  static Corpus from_file(const std::filesystem::path& path);

  const std::string& name() const { return name_; }
  int64_t num_words() const { return static_cast<int64_t>(word_begin_.size()); }
  // Word indices that start a sentence (the first word, and every word after one ending in . ? or !).
  const std::vector<int64_t>& sentence_starts() const { return sentence_starts_; }

  // Words [begin, begin + n) joined by single spaces, wrapping around to word 0 past the end (which starts
  // a sentence). `sentence_offsets` gets the byte offset of every sentence start inside the text, the
  // first always 0 (nltk's sent_tokenize in RULER also makes the leading fragment a sentence).
  std::string words(int64_t begin, int64_t n, std::vector<size_t>* sentence_offsets = nullptr) const;

  // Distinct lowercase words of 3-12 letters (letters only, punctuation around them stripped), sorted.
  const std::vector<std::string>& vocabulary() const { return vocabulary_; }

 private:
  std::string name_;
  std::string joined_;                // every word, separated by one space
  std::vector<uint32_t> word_begin_;  // [num_words] byte offset of each word in joined_
  std::vector<uint32_t> word_end_;    // [num_words] one past its last byte
  std::vector<int64_t> sentence_starts_;
  std::vector<bool> starts_sentence_;  // [num_words]
  std::vector<std::string> vocabulary_;
};

}  // namespace nanovllm::eval
