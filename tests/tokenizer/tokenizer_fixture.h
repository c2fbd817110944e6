// Shared by the tokenizer tests: the Qwen3 tokenizer, the HF golden file (scripts/tokenizer_golden.mjs) and the
// byte-level spelling of a byte.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "nanovllm/tokenizer/tokenizer.h"
#include "nanovllm/tokenizer/utf8.h"

namespace nanovllm::tokenizer::testing {

// GPT-2 byte-level spelling of one byte, written out by hand from the published table: printable
// Latin-1 bytes stand for themselves, the others are numbered from U+0100 in byte order.
inline std::string byte_token(unsigned b) {
  uint32_t cp;
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) cp = b;
  else if (b <= 0x20) cp = 0x100 + b;
  else if (b <= 0xA0) cp = 0x100 + 33 + (b - 0x7F);
  else cp = 0x100 + 33 + 34;  // 0xAD
  std::string s;
  append_utf8(s, cp);
  return s;
}

inline std::string qwen3_dir() { return std::string(NANOVLLM_TEST_DATA) + "/qwen3-tokenizer"; }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::from_model_dir(qwen3_dir());
  return tok;
}

inline const nlohmann::json& golden() {
  static const nlohmann::json g =
      nlohmann::json::parse(read_text(std::string(NANOVLLM_TEST_DATA) + "/tokenizer/qwen3_golden.json"));
  return g;
}

}  // namespace nanovllm::tokenizer::testing
