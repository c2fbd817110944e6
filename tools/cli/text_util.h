// Helpers shared by the text subcommands (tokenize, detokenize, generate, chat, bench tokenizer).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::cli {

// Whole file as bytes; nanovllm::Error naming `option` and the path when it cannot be read.
std::string read_text_file(const std::filesystem::path& path, const std::string& option);
// Parsed JSON file; nanovllm::Error naming `option` and the path when it is unreadable or invalid.
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& option);
// <model_dir>/tokenizer.json (+ tokenizer_config.json); a clear error when the directory has none.
Tokenizer load_model_tokenizer(const std::filesystem::path& model_dir);

}  // namespace nanovllm::cli
