#include "nanovllm/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <cstring>

#include "nanovllm/core/error.h"

namespace nanovllm::tokenizer {
namespace {

utf8proc_option_t options_for(NormalForm form) {
  const int base = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: return static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE);
    case NormalForm::kNFD: return static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE);
    case NormalForm::kNFKC: return static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::kNFKD: return static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return static_cast<utf8proc_option_t>(base);
}

void normalize_chunk(std::string_view chunk, NormalForm form, std::string& out) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(chunk.data()),
                   static_cast<utf8proc_ssize_t>(chunk.size()), &result, options_for(form));
  NANOVLLM_CHECK(n >= 0, "tokenizer: unicode normalization failed: ", utf8proc_errmsg(n));
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
}

}  // namespace

void append_normalized(std::string_view text, NormalForm form, std::string& out) {
  // Every normal form leaves ASCII alone, and no ASCII character ever combines with what precedes it, so
  // the text splits into independent chunks right before each ASCII byte. Pure-ASCII chunks are copied;
  // only chunks holding non-ASCII go through utf8proc (which allocates).
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && static_cast<unsigned char>(text[j]) < 0x80) ++j;
    // [i, j) is ASCII; the chunk that needs work starts at the last ASCII char before j (a base letter may
    // take a following combining mark), or at j when there is none.
    if (j == n) { out.append(text.substr(i)); break; }
    size_t start = j > i ? j - 1 : j;
    out.append(text.substr(i, start - i));
    size_t k = j;
    while (k < n && static_cast<unsigned char>(text[k]) >= 0x80) ++k;
    normalize_chunk(text.substr(start, k - start), form, out);
    i = k;
  }
}

void Normalizer::normalize(std::string_view text, std::string& out) const {
  if (steps_.empty()) { out.append(text); return; }
  std::string tmp;
  std::string_view cur = text;
  for (size_t s = 0; s < steps_.size(); ++s) {
    std::string& dst = s + 1 == steps_.size() ? out : tmp;
    if (&dst == &tmp) {
      std::string next;
      append_normalized(cur, steps_[s], next);
      tmp = std::move(next);
      cur = tmp;
    } else {
      append_normalized(cur, steps_[s], dst);
    }
  }
}

}  // namespace nanovllm::tokenizer
