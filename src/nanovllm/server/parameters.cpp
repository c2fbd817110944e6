#include "nanovllm/server/parameters.h"

#include <string_view>

#include "nanovllm/server/api_error.h"

namespace nanovllm::server {
namespace {

using Body = nlohmann::ordered_json;

// Implemented by both endpoints (validated in protocol.cpp).
constexpr std::string_view kCommon[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "stop", "stop_token_ids", "min_tokens", "ignore_eos", "n", "logprobs", "stream",
    "stream_options", "logit_bias",
    // Structured outputs (structured_request.h).
    "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    // Labels for the caller's own bookkeeping: they change nothing that is generated.
    "user", "metadata", "prompt_cache_key", "safety_identifier"};
constexpr std::string_view kCompletions[] = {"prompt"};
constexpr std::string_view kChat[] = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                      "chat_template_kwargs", "add_generation_prompt", "tool_choice",
                                      "parallel_tool_calls"};

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view key) {
  for (std::string_view n : names)
    if (n == key) return true;
  return false;
}

[[noreturn]] void unsupported(const std::string& key, const std::string& why) {
  throw ApiException(ApiError::bad_request("'" + key + "' is not supported" + why, key));
}

bool is_string(const Body& v, std::initializer_list<std::string_view> allowed) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  for (std::string_view a : allowed)
    if (s == a) return true;
  return false;
}

// Parameters the engine does not implement, accepted only with the value that asks for nothing. Returns
// false for keys it does not know.
bool check_default_only(const std::string& key, const Body& v, const Body& body, Endpoint ep) {
  const bool chat = ep == Endpoint::kChat;
  if (!chat && key == "echo") {
    if (!v.is_boolean()) throw ApiException(ApiError::bad_request("'echo' must be a boolean", key));
    if (v.get<bool>()) unsupported(key, "");
    return true;
  }
  if (!chat && key == "best_of") {
    const auto n = body.find("n");
    const Body one = 1;
    const Body& want = n == body.end() || n->is_null() ? one : *n;
    if (!v.is_number_integer() || v != want) unsupported(key, " (only best_of equal to n)");
    return true;
  }
  if (!chat && key == "suffix") {
    if (!is_string(v, {""})) unsupported(key, "");
    return true;
  }
  if (!chat) return false;
  if (key == "function_call") {  // the deprecated form of tool_choice
    if (!is_string(v, {"auto", "none"})) unsupported(key, " (only \"auto\" or \"none\"; use tool_choice)");
    return true;
  }
  if (key == "modalities") {
    if (!v.is_array() || v.size() != 1 || !is_string(v[0], {"text"})) unsupported(key, " (only [\"text\"])");
    return true;
  }
  if (key == "store") {
    if (!v.is_boolean() || v.get<bool>()) unsupported(key, " (nothing is stored)");
    return true;
  }
  if (key == "service_tier") {
    if (!is_string(v, {"auto", "default"})) unsupported(key, " (only \"auto\" or \"default\")");
    return true;
  }
  return false;
}

}  // namespace

void check_parameters(const Body& body, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::kChat;
  for (const auto& [key, value] : body.items()) {
    if (listed(kCommon, key) || (chat ? listed(kChat, key) : listed(kCompletions, key))) continue;
    if (value.is_null()) continue;  // null means "not given", as everywhere else
    if (check_default_only(key, value, body, endpoint)) continue;
    unsupported(key, " by this server");
  }
}

}  // namespace nanovllm::server
