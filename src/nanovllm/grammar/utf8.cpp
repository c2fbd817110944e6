#include "nanovllm/grammar/utf8.h"

#include <algorithm>

namespace nanovllm::grammar {

void append_utf8(uint32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

int64_t decode_utf8(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return -1;
  const auto b0 = static_cast<unsigned char>(text[pos]);
  int len = 0;
  uint32_t c = 0;
  if (b0 < 0x80) {
    ++pos;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    c = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    c = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    c = b0 & 0x07;
  } else {
    return -1;
  }
  if (pos + static_cast<size_t>(len) > text.size()) return -1;
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + static_cast<size_t>(i)]);
    if ((b & 0xC0) != 0x80) return -1;
    c = (c << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMinForLength[len] || c > kMaxCodepoint || (c >= 0xD800 && c <= 0xDFFF)) return -1;
  pos += static_cast<size_t>(len);
  return c;
}

namespace {

int utf8_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// Byte i of c's `length`-byte encoding.
uint8_t utf8_byte(uint32_t c, int length, int i) {
  const int shift = 6 * (length - 1 - i);
  if (i == 0) {
    static constexpr uint8_t kLead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    return static_cast<uint8_t>(kLead[length] | (c >> shift));
  }
  return static_cast<uint8_t>(0x80 | ((c >> shift) & 0x3F));
}

// [lo, hi] with equal encoded lengths: split until each piece is a product of byte ranges, i.e. the
// suffix after the first differing byte spans every continuation value (0x80..0xBF) on both ends.
void split_same_length(uint32_t lo, uint32_t hi, int length, std::vector<ByteRangeSeq>& out) {
  for (int i = length - 1; i > 0; --i) {
    const uint32_t mask = (1u << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        split_same_length(lo, lo | mask, length, out);
        split_same_length((lo | mask) + 1, hi, length, out);
        return;
      }
      if ((hi & mask) != mask) {
        split_same_length(lo, (hi & ~mask) - 1, length, out);
        split_same_length(hi & ~mask, hi, length, out);
        return;
      }
    }
  }
  ByteRangeSeq s;
  s.length = length;
  for (int i = 0; i < length; ++i) {
    s.lo[static_cast<size_t>(i)] = utf8_byte(lo, length, i);
    s.hi[static_cast<size_t>(i)] = utf8_byte(hi, length, i);
  }
  out.push_back(s);
}

}  // namespace

std::vector<ByteRangeSeq> utf8_byte_ranges(const CodepointRanges& ranges) {
  static constexpr uint32_t kLengthEnd[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodepoint};
  std::vector<ByteRangeSeq> out;
  for (auto [lo, hi] : ranges) {
    while (lo <= hi) {
      const int length = utf8_length(lo);
      const uint32_t end = std::min(hi, kLengthEnd[length - 1]);
      split_same_length(lo, end, length, out);
      if (end == hi) break;
      lo = end + 1;
    }
  }
  return out;
}

}  // namespace nanovllm::grammar
