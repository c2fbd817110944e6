// How a task's text becomes the model's prompt: bare ("none", RULER's "base" template: the text as is,
// encoded with the tokenizer's special tokens like vLLM's text prompts) or inside the model's chat
// template (one user turn, generation prompt added, thinking off; encoded without extra special tokens as
// apply_chat_template does). RULER's answer prefix always follows.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace nanovllm::eval {

struct PromptFormat {
  std::string name = "none";  // "none" or "chat"
  std::string prefix;         // text before the user turn's content
  std::string suffix;         // text after it, up to the model's turn header
  bool add_special_tokens = true;

  std::string wrap(std::string_view user, std::string_view answer_prefix) const;
};

PromptFormat none_format();
// The chat template of <model_dir>/tokenizer_config.json (or chat_template.jinja), rendered once around a
// marker and split there: the content goes in verbatim. nanovllm::Error when the model has no chat
// template, or the template alters the content (then prefix/suffix cannot be taken apart).
PromptFormat chat_format(const std::filesystem::path& model_dir);
// `choice`: "none", "chat", or "auto" (chat when the model has a chat template, else none).
PromptFormat resolve_format(std::string_view choice, const std::filesystem::path& model_dir);

}  // namespace nanovllm::eval
