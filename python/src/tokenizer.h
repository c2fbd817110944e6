// The model directory's tokenizer and chat template for Python (LLM.get_tokenizer(), or standalone via
// Tokenizer.from_pretrained(dir) in place of transformers.AutoTokenizer).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::python {

class TokenizerHandle {
 public:
  // `load_template` is called on the first apply_chat_template (a model may have no template).
  TokenizerHandle(Tokenizer tokenizer, std::function<chat::ChatTemplate()> load_template)
      : tokenizer_(std::move(tokenizer)), load_template_(std::move(load_template)) {}
  static TokenizerHandle from_model_dir(const std::filesystem::path& dir);

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const chat::ChatTemplate& chat_template();

 private:
  Tokenizer tokenizer_;
  std::function<chat::ChatTemplate()> load_template_;
  std::optional<chat::ChatTemplate> template_;
};

}  // namespace nanovllm::python
