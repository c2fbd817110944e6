// UTF-8 helpers of the grammar layer: encoding a code point, decoding one from text, and turning a class of
// code points into alternatives of byte-range sequences (how a character class becomes a byte automaton).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nanovllm/grammar/grammar.h"

namespace nanovllm::grammar {

void append_utf8(uint32_t codepoint, std::string& out);
// The value of a hex digit (0-9, a-f, A-F), or -1: the \xNN / \uXXXX escapes of regexes and EBNF strings.
inline int hex_digit(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}
// Decodes the code point at text[pos] and advances pos; -1 (pos unchanged) when the bytes there are not
// valid UTF-8.
int64_t decode_utf8(std::string_view text, size_t& pos);

// One way to spell a code point range in UTF-8: `length` bytes, byte i in [lo[i], hi[i]].
struct ByteRangeSeq {
  int length = 0;
  std::array<uint8_t, 4> lo{}, hi{};
};
// The UTF-8 encodings of the code points in `ranges` as a union of byte-range sequences (the classic
// split at the 1/2/3/4-byte boundaries and at continuation-byte boundaries).
std::vector<ByteRangeSeq> utf8_byte_ranges(const CodepointRanges& ranges);

}  // namespace nanovllm::grammar
