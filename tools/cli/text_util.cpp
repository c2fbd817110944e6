#include "text_util.h"

#include <fstream>
#include <sstream>

#include "nanovllm/core/error.h"

namespace nanovllm::cli {

std::string read_text_file(const std::filesystem::path& path, const std::string& option) {
  std::ifstream f(path, std::ios::binary);
  NANOVLLM_CHECK(f.good() && !std::filesystem::is_directory(path), option, ": cannot read ", path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& option) {
  const std::string text = read_text_file(path, option);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    NANOVLLM_FAIL(option, ": ", path.string(), " is not valid JSON: ", e.what());
  }
}

Tokenizer load_model_tokenizer(const std::filesystem::path& model_dir) {
  NANOVLLM_CHECK(std::filesystem::is_directory(model_dir), "--model: ", model_dir.string(), " is not a directory");
  NANOVLLM_CHECK(std::filesystem::is_regular_file(model_dir / "tokenizer.json"), "--model: ", model_dir.string(),
                 " has no tokenizer.json");
  return Tokenizer::from_model_dir(model_dir);
}

}  // namespace nanovllm::cli
