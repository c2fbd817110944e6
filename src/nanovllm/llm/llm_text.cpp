// Text I/O of the engine: the model directory's tokenizer and chat template (loaded once, on first use),
// tokenizer_config.json's EOS id, and LLM::generate for text prompts.
#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/llm/structured_output.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm {
namespace {

std::filesystem::path tokenizer_json_path(const std::filesystem::path& model) { return model / "tokenizer.json"; }
std::filesystem::path tokenizer_config_path(const std::filesystem::path& model) {
  return model / "tokenizer_config.json";
}

}  // namespace

bool LLMEngine::has_tokenizer() const {
  return std::filesystem::is_regular_file(tokenizer_json_path(config_.model.path));
}

const tokenizer::Tokenizer& LLMEngine::tokenizer() const {
  std::lock_guard<std::mutex> lock(text_mu_);
  if (!tokenizer_) {
    // THUDM's original GLM-4 repos ship a tiktoken file read by their own Python (tokenization_chatglm.py);
    // the transformers-native `-hf` repos carry the same vocabulary as tokenizer.json.
    const bool tiktoken = std::filesystem::is_regular_file(config_.model.path / "tokenizer.model") ||
                          std::filesystem::is_regular_file(config_.model.path / "tokenization_chatglm.py");
    NANOVLLM_CHECK(has_tokenizer(), config_.model.path.string(),
                   ": no tokenizer.json in the model directory; text prompts and decoded text need one "
                   "(use token ids instead, e.g. --prompt-ids)",
                   tiktoken ? ". Its tokenizer.model / tokenization_chatglm.py (GLM-4's tiktoken tokenizer) is not "
                              "supported: copy tokenizer.json and tokenizer_config.json from the model's "
                              "transformers-native repo (e.g. THUDM/glm-4-9b-chat-1m-hf) into it"
                            : "");
    // Its ids must fit the model's vocabulary: an id outside would index past the embedding.
    tokenizer_ = std::make_shared<const tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_model_dir(config_.model.path, model_config_.vocab_size));
  }
  return *tokenizer_;
}

StructuredOutputs& LLMEngine::structured_outputs() const {
  const tokenizer::Tokenizer& tok = tokenizer();  // before text_mu_: it takes it too
  std::lock_guard<std::mutex> lock(text_mu_);
  if (!structured_outputs_)
    structured_outputs_ = std::make_unique<StructuredOutputs>(tok, model_config_.eos_token_ids, model_config_.vocab_size);
  return *structured_outputs_;
}

const chat::ChatTemplate& LLMEngine::chat_template() const {
  std::lock_guard<std::mutex> lock(text_mu_);
  if (!chat_template_) {
    const auto path = tokenizer_config_path(config_.model.path);
    NANOVLLM_CHECK(std::filesystem::is_regular_file(path), config_.model.path.string(),
                   ": no tokenizer_config.json in the model directory, so no chat template");
    chat_template_ = std::make_shared<const chat::ChatTemplate>(chat::ChatTemplate::from_tokenizer_config(path));
  }
  return *chat_template_;
}

std::optional<int32_t> LLMEngine::tokenizer_eos_token_id(const std::filesystem::path& model_dir, int64_t vocab_size) {
  const auto path = tokenizer_config_path(model_dir);
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  std::ifstream f(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    NANOVLLM_FAIL(path.string(), ": invalid JSON: ", e.what());
  }
  NANOVLLM_CHECK(cfg.is_object(), path.string(), ": expected a JSON object");
  const nlohmann::json eos = cfg.value("eos_token", nlohmann::json());
  std::string name;
  if (eos.is_string()) name = eos.get<std::string>();
  else if (eos.is_object() && eos.contains("content") && eos["content"].is_string()) name = eos["content"];
  if (name.empty()) return std::nullopt;
  // Cheap path: the id is in added_tokens_decoder ({"151645": {"content": "<|im_end|>", ...}}), so the
  // 10 MB tokenizer.json need not be parsed before the first text request.
  if (const auto it = cfg.find("added_tokens_decoder"); it != cfg.end() && it->is_object()) {
    for (const auto& [key, entry] : it->items()) {
      if (!entry.is_object() || entry.value("content", std::string()) != name) continue;
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      NANOVLLM_CHECK(end != key.c_str() && *end == '\0' && id >= 0 && id < vocab_size, path.string(),
                     ": added_tokens_decoder['", key, "'] (the eos_token '", name,
                     "') is not a token id of the model's vocabulary [0, ", vocab_size,
                     ") (config.json vocab_size)");
      return static_cast<int32_t>(id);
    }
  }
  // Rare (real checkpoints list their special tokens there): parse tokenizer.json for it.
  if (!std::filesystem::is_regular_file(tokenizer_json_path(model_dir))) return std::nullopt;
  return tokenizer::Tokenizer::from_model_dir(model_dir, vocab_size).eos_token_id();
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts, const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts,
                                         const std::vector<SamplingParams>& params, const StepCallback& on_step) {
  const tokenizer::Tokenizer& tok = engine_.tokenizer();
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      ids.push_back(tok.encode(prompts[i]));
    } catch (const Error& e) {
      throw e.prefixed(detail::concat("prompt ", i, ": "));  // keeps the tokenizer's file:line
    }
  }
  std::vector<RequestOutput> outputs = generate(ids, params, on_step);
  for (RequestOutput& o : outputs) o.text = tok.decode(o.token_ids, /*skip_special_tokens=*/true);
  return outputs;
}

std::string LLM::decode(std::span<const int32_t> token_ids, bool skip_special_tokens) const {
  return engine_.tokenizer().decode(token_ids, skip_special_tokens);
}

std::vector<int32_t> LLM::encode(std::string_view text, bool add_special_tokens) const {
  return engine_.tokenizer().encode(text, add_special_tokens);
}

}  // namespace nanovllm
