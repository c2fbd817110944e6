// UTF-8 helpers: the interpreter's strings are UTF-8 bytes, but Python indexes, slices, strips and
// measures strings by code point, so those operations decode first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::chat::utf8 {

// Code points of s; invalid bytes decode to themselves (U+0080..U+00FF) rather than failing.
std::vector<char32_t> decode(std::string_view s);
std::string encode(const std::vector<char32_t>& cps);
void append(std::string& out, char32_t cp);
// Python str.isspace() for one code point.
bool is_space(char32_t cp);

}  // namespace nanovllm::chat::utf8
