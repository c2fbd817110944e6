// GPT-2 byte-level alphabet: each of the 256 bytes is shown as one printable code point; tokenizer.json's
// vocab and merges are written in that alphabet. We convert the vocab back to raw bytes once at load time,
// so encoding runs BPE straight on the bytes of the text and never builds the mapped string.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanovllm::tokenizer {

// byte -> code point of its printable stand-in.
const std::array<uint32_t, 256>& byte_to_unicode();

// Inverse of byte_to_unicode(): returns -1 for a code point that stands for no byte.
int unicode_to_byte(uint32_t cp);

// The ByteLevel decoder's rule for one token string: when every character stands for a byte, the token is
// those bytes; otherwise (e.g. an added token written with ordinary characters) it is its own UTF-8 bytes.
std::string byte_level_token_bytes(std::string_view token);
// The same, appended to `out`.
void append_byte_level_token_bytes(std::string& out, std::string_view token);

// The byte-level (vocab) spelling of raw bytes.
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace nanovllm::tokenizer
