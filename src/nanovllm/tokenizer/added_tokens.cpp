#include "nanovllm/tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "nanovllm/tokenizer/utf8.h"

namespace nanovllm::tokenizer {
namespace {

bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, join controls.
bool is_word_char(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Last code point of non-empty valid UTF-8 ending at `end`; `begin` receives its start.
uint32_t last_char(std::string_view s, size_t end, size_t& begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t len;
  begin = b;
  return decode_utf8(reinterpret_cast<const unsigned char*>(s.data()) + b, len);
}

uint32_t first_char(std::string_view s, size_t at, size_t& len) {
  return decode_utf8(reinterpret_cast<const unsigned char*>(s.data()) + at, len);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens)
    : patterns_(std::move(patterns)), tokens_(std::move(tokens)), by_first_byte_(256) {
  for (uint32_t i = 0; i < patterns_.size(); ++i) {
    if (patterns_[i].empty()) continue;
    by_first_byte_[static_cast<unsigned char>(patterns_[i][0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    // Longest first; equal lengths keep insertion order (the first pattern added wins, as in aho-corasick).
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return patterns_[a].size() > patterns_[b].size(); });
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  const size_t n = text.size();
  size_t start_offset = 0;
  size_t i = 0;
  while (i < n) {
    const auto& cands = by_first_byte_[static_cast<unsigned char>(text[i])];
    int found = -1;
    for (uint32_t c : cands) {
      const std::string& p = patterns_[c];
      if (p.size() <= n - i && text.compare(i, p.size(), p) == 0) { found = static_cast<int>(c); break; }
    }
    if (found < 0) { ++i; continue; }
    const AddedToken& tok = *tokens_[found];
    size_t start = i, stop = i + patterns_[found].size();
    i = stop;  // matches never overlap, even when this one is rejected below
    if (tok.single_word) {
      size_t b, len;
      const bool left_ok = start == 0 || !is_word_char(last_char(text, start, b));
      const bool right_ok = stop == n || !is_word_char(first_char(text, stop, len));
      if (!left_ok || !right_ok) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b;
        if (!is_white_space(last_char(text, s, b))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (tok.rstrip) {
      while (stop < n) {
        size_t len;
        if (!is_white_space(first_char(text, stop, len))) break;
        stop += len;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back({start_offset, n, -1});
}

}  // namespace nanovllm::tokenizer
