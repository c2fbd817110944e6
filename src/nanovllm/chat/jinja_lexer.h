// Lexer of the Jinja subset: splits template text from tags and tokenises tag contents, applying
// jinja2's whitespace control (- / + markers, trim_blocks, lstrip_blocks, no trailing newline).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanovllm::chat::jinja {

enum class TokenType { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenType type;
  std::string text;  // data text, name, decoded string literal, operator
  int64_t int_value = 0;
  double float_value = 0.0;
  size_t pos = 0;  // byte offset in the normalised source
};

// jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_source(const std::string& source);

// Tokenises a normalised source. Throws nanovllm::Error on unterminated tags/strings etc.
std::vector<Token> tokenize(const std::string& source, bool trim_blocks = true, bool lstrip_blocks = true);

}  // namespace nanovllm::chat::jinja
