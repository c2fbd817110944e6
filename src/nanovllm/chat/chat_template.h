// Renders a model's chat template (tokenizer_config.json "chat_template") for a list of messages,
// producing the same text as Hugging Face transformers' tokenizer.apply_chat_template(tokenize=False).
//
// The template language is a Jinja subset (jinja_*.h) run with transformers' environment:
// trim_blocks, lstrip_blocks, loop controls, raise_exception(), strftime_now() and a json.dumps-style
// tojson filter. Messages/tools use nlohmann::ordered_json so tojson keeps the caller's key order
// (as Python dicts do); a plain nlohmann::json overload exists for convenience (its keys are sorted).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace nanovllm::chat {

namespace jinja {
struct Program;
}

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // unset: the variable is undefined in the template (Qwen3)
  nlohmann::ordered_json tools;         // null: `tools` is None; otherwise a list of tool schemas
  nlohmann::ordered_json extra_context;  // object: extra template variables (e.g. date_string)
};

class ChatTemplate {
 public:
  // Reads "chat_template" (a string, or a list of {name, template} where "default" is taken), plus
  // bos_token / eos_token (strings or {"content": ...}); falls back to a chat_template.jinja file
  // next to the config when the config has none.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& tokenizer_config_json);

  // Parses `source` now: syntax errors and unsupported constructs throw nanovllm::Error here.
  // Empty bos/eos tokens are left undefined in the template.
  explicit ChatTemplate(std::string source, std::string bos_token = "", std::string eos_token = "");

  std::string render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& opt = {}) const;
  std::string render(const nlohmann::json& messages, const ChatTemplateOptions& opt = {}) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace nanovllm::chat
