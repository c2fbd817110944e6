#include "eval/prompt_format.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

bool has_chat_template(const std::filesystem::path& model_dir) {
  if (std::filesystem::is_regular_file(model_dir / "chat_template.jinja")) return true;
  std::ifstream f(model_dir / "tokenizer_config.json");
  if (!f) return false;
  const nlohmann::json cfg = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  return cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null();
}

}  // namespace

std::string PromptFormat::wrap(std::string_view user, std::string_view answer_prefix) const {
  std::string out;
  out.reserve(prefix.size() + user.size() + suffix.size() + answer_prefix.size());
  out.append(prefix).append(user).append(suffix).append(answer_prefix);
  return out;
}

PromptFormat none_format() { return PromptFormat{}; }

PromptFormat chat_format(const std::filesystem::path& model_dir) {
  NANOVLLM_CHECK(has_chat_template(model_dir), model_dir.string(),
                 ": the model has no chat template (tokenizer_config.json chat_template or chat_template.jinja); "
                 "use --template none");
  const chat::ChatTemplate tmpl = chat::ChatTemplate::from_tokenizer_config(model_dir / "tokenizer_config.json");
  // A marker no template rewrites (no leading/trailing space to strip, nothing to escape).
  constexpr std::string_view kMarker = "NANOVLLMEVALUSERTURNxq7";
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", kMarker}});
  chat::ChatTemplateOptions opt;
  opt.add_generation_prompt = true;
  opt.enable_thinking = false;  // the answer prefix follows the turn header at once
  const std::string rendered = tmpl.render(messages, opt);
  const size_t at = rendered.find(kMarker);
  NANOVLLM_CHECK(at != std::string::npos && rendered.find(kMarker, at + 1) == std::string::npos, model_dir.string(),
                 ": the chat template does not keep a user message verbatim; use --template none");
  PromptFormat f;
  f.name = "chat";
  f.prefix = rendered.substr(0, at);
  f.suffix = rendered.substr(at + kMarker.size());
  f.add_special_tokens = false;
  return f;
}

PromptFormat resolve_format(std::string_view choice, const std::filesystem::path& model_dir) {
  if (choice == "none") return none_format();
  if (choice == "chat") return chat_format(model_dir);
  NANOVLLM_CHECK(choice == "auto", "--template: expected auto, chat or none, got '", choice, "'");
  return has_chat_template(model_dir) ? chat_format(model_dir) : none_format();
}

}  // namespace nanovllm::eval
