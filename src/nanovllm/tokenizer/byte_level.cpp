#include "nanovllm/tokenizer/byte_level.h"

#include "nanovllm/tokenizer/utf8.h"

namespace nanovllm::tokenizer {

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable[b] ? static_cast<uint32_t>(b) : next++;
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv;
    inv.fill(-1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::string byte_level_token_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  append_byte_level_token_bytes(out, token);
  return out;
}

void append_byte_level_token_bytes(std::string& out, std::string_view token) {
  const size_t start = out.size();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Step st = next_utf8(p + i, token.size() - i);
    size_t len = 0;
    const int b = st.status == Utf8Status::kValid ? unicode_to_byte(decode_utf8(p + i, len)) : -1;
    if (b < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(b));
    i += len;
  }
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  const auto& fwd = byte_to_unicode();
  for (unsigned char b : bytes) append_utf8(out, fwd[b]);
  return out;
}

}  // namespace nanovllm::tokenizer
