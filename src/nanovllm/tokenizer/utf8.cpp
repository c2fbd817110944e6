#include "nanovllm/tokenizer/utf8.h"

namespace nanovllm::tokenizer {

Utf8Step next_utf8(const unsigned char* p, size_t n) {
  const unsigned c = p[0];
  if (c < 0x80) return {Utf8Status::kValid, 1};
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return {Utf8Status::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= n) return {Utf8Status::kIncomplete, k};
    const unsigned b = p[k];
    const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Status::kInvalid, k};
  }
  return {Utf8Status::kValid, need};
}

std::optional<size_t> find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) { ++i; continue; }
    const Utf8Step st = next_utf8(p + i, n - i);
    if (st.status != Utf8Status::kValid) return i;
    i += st.len;
  }
  return std::nullopt;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0, run = 0;  // [run, i) is valid and not yet copied
  while (i < n) {
    if (p[i] < 0x80) { ++i; continue; }
    const Utf8Step st = next_utf8(p + i, n - i);
    if (st.status == Utf8Status::kValid) { i += st.len; continue; }
    out.append(bytes.data() + run, i - run);
    out.append(kReplacementChar);
    i += st.len;
    run = i;
  }
  out.append(bytes.data() + run, n - run);
}

}  // namespace nanovllm::tokenizer
