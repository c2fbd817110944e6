#include "eval/corpus.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <unordered_set>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {

std::string_view builtin_haystack_text();  // corpus_data.cpp

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// A word ending a sentence: its last character, past closing quotes and brackets, is . ? or !
bool ends_sentence(std::string_view w) {
  while (!w.empty() && (w.back() == '\'' || w.back() == '"' || w.back() == ')')) w.remove_suffix(1);
  return !w.empty() && (w.back() == '.' || w.back() == '?' || w.back() == '!');
}

// "LORD," -> "lord"; "man's" -> "" (not letters only); "a" -> "" (too short).
std::string vocabulary_word(std::string_view w) {
  while (!w.empty() && !is_alpha(w.front())) w.remove_prefix(1);
  while (!w.empty() && !is_alpha(w.back())) w.remove_suffix(1);
  if (w.size() < 3 || w.size() > 12) return {};
  std::string out(w);
  for (char& c : out) {
    if (!is_alpha(c)) return {};
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

Corpus::Corpus(std::string_view text, std::string name) : name_(std::move(name)) {
  joined_.reserve(text.size());
  std::unordered_set<std::string> vocab;
  bool next_starts = true;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && is_space(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    if (j == i) break;
    if (!joined_.empty()) joined_.push_back(' ');
    NANOVLLM_CHECK(joined_.size() + (j - i) < UINT32_MAX, name_, ": haystack text over 4 GB");
    word_begin_.push_back(static_cast<uint32_t>(joined_.size()));
    const std::string_view word = text.substr(i, j - i);
    joined_.append(word);
    word_end_.push_back(static_cast<uint32_t>(joined_.size()));
    if (next_starts) sentence_starts_.push_back(num_words() - 1);
    starts_sentence_.push_back(next_starts);
    next_starts = ends_sentence(word);
    if (std::string v = vocabulary_word(word); !v.empty()) vocab.insert(std::move(v));
    i = j;
  }
  NANOVLLM_CHECK(num_words() >= 1000, name_, ": a haystack needs at least 1000 words, got ", num_words());
  vocabulary_.assign(vocab.begin(), vocab.end());
  std::sort(vocabulary_.begin(), vocabulary_.end());
}

const Corpus& Corpus::builtin() {
  static const Corpus corpus(builtin_haystack_text(), "kjv (built in)");
  return corpus;
}

Corpus Corpus::from_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  NANOVLLM_CHECK(f.good(), "cannot read haystack file ", path.string());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return Corpus(text, path.string());
}

std::string Corpus::words(int64_t begin, int64_t n, std::vector<size_t>* sentence_offsets) const {
  NANOVLLM_CHECK(begin >= 0 && begin < num_words() && n >= 0, "Corpus::words: bad range ", begin, " + ", n);
  std::string out;
  if (sentence_offsets) sentence_offsets->clear();
  int64_t w = begin;
  while (n > 0) {
    // One run without wrapping: words [w, w + take) are contiguous in joined_.
    const int64_t take = std::min(n, num_words() - w);
    if (!out.empty()) out.push_back(' ');
    const size_t base = out.size();
    const uint32_t first = word_begin_[static_cast<size_t>(w)];
    out.append(joined_, first, word_end_[static_cast<size_t>(w + take - 1)] - first);
    if (sentence_offsets) {
      if (base == 0) sentence_offsets->push_back(0);
      auto it = std::lower_bound(sentence_starts_.begin(), sentence_starts_.end(), base == 0 ? w + 1 : w);
      for (; it != sentence_starts_.end() && *it < w + take; ++it)
        sentence_offsets->push_back(base + word_begin_[static_cast<size_t>(*it)] - first);
    }
    n -= take;
    w = 0;
  }
  return out;
}

}  // namespace nanovllm::eval
