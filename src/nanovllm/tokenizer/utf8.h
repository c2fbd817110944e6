// UTF-8 helpers shared by the tokenizer: strict validation (the same rules as Rust's `str`: no overlongs,
// no surrogates, nothing past U+10FFFF) and the lossy conversion HF's decoders use (Rust's
// String::from_utf8_lossy: one U+FFFD per maximal invalid subsequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanovllm::tokenizer {

enum class Utf8Status { kValid, kInvalid, kIncomplete };

struct Utf8Step {
  Utf8Status status;
  size_t len;  // kValid: bytes of the character; kInvalid: bytes to replace by one U+FFFD; kIncomplete: bytes seen
};

// Classifies the sequence that starts at p[0] (n >= 1 bytes available).
Utf8Step next_utf8(const unsigned char* p, size_t n);

// Byte offset of the first invalid (or truncated) sequence, or nullopt when `s` is valid UTF-8.
std::optional<size_t> find_invalid_utf8(std::string_view s);

// Decodes one code point from valid UTF-8 at p; sets len to its byte count.
inline uint32_t decode_utf8(const unsigned char* p, size_t& len) {
  const unsigned c = p[0];
  if (c < 0x80) { len = 1; return c; }
  if (c < 0xE0) { len = 2; return ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu); }
  if (c < 0xF0) { len = 3; return ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); }
  len = 4;
  return ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

void append_utf8(std::string& out, uint32_t cp);

// Appends `bytes` to `out`, replacing invalid sequences by U+FFFD exactly like String::from_utf8_lossy.
// A truncated sequence at the very end counts as invalid (one U+FFFD).
void append_utf8_lossy(std::string& out, std::string_view bytes);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace nanovllm::tokenizer
