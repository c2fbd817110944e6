// Shared loading for tokenizer tests: the Qwen3 tokenizer and the HF golden file (scripts/tokenizer_golden.mjs).
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::tokenizer::testing {

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
