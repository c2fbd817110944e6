#include "nanovllm/server/protocol.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/json_depth.h"
#include "nanovllm/server/parameters.h"
#include "nanovllm/server/structured_request.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::server {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;
// A request body. Parsed once, walked in place (never copied: a copy recurses once per nesting level) and
// ordered, so the messages reach the chat template with their keys in the client's order.
using Body = nlohmann::ordered_json;

constexpr int64_t kMaxLogprobs = 20;  // SamplingParams' limit

[[noreturn]] void fail(const std::string& param, const std::string& message) {
  throw ApiException(ApiError::bad_request(message, param));
}

// Field access: absent and null both mean "not given" (clients send explicit nulls).
const Body* field(const Body& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t get_int(const Body& v, const char* key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) fail(key, std::string("'") + key + "' must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(key, std::string("'") + key + "' is too large");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    fail(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "], got " + std::to_string(x));
  return x;
}

double get_number(const Body& v, const char* key, double lo, double hi) {
  if (!v.is_number()) fail(key, std::string("'") + key + "' must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream os;
    os << "'" << key << "' must be in [" << lo << ", " << hi << "], got " << x;
    fail(key, os.str());
  }
  return x;
}

bool get_bool(const Body& v, const char* key) {
  if (!v.is_boolean()) fail(key, std::string("'") + key + "' must be a boolean");
  return v.get<bool>();
}

std::vector<int32_t> token_list(const Body& arr, int64_t vocab, const char* key) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const Body& t : arr) {
    if (!t.is_number_integer()) fail(key, std::string("'") + key + "' token ids must be integers");
    const bool inside = t.is_number_unsigned() ? t.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                               : t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab;
    if (!inside) fail(key, "token id " + t.dump() + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    const auto id = t.get<int64_t>();
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<int32_t> encode(const ModelContext& ctx, const std::string& text, bool add_special, const char* key) {
  try {
    return ctx.engine->tokenizer().encode(text, add_special);
  } catch (const std::exception& e) {
    fail(key, user_message(e));
  }
}

std::vector<std::vector<int32_t>> parse_prompt(const Body& body, const ModelContext& ctx) {
  const Body* p = field(body, "prompt");
  if (!p) fail("prompt", "'prompt' is required");
  if (p->is_string()) return {encode(ctx, p->get<std::string>(), true, "prompt")};
  if (!p->is_array()) fail("prompt", "'prompt' must be a string, a list of token ids, or a list of either");
  if (p->empty()) fail("prompt", "'prompt' is empty");
  if ((*p)[0].is_number()) return {token_list(*p, ctx.vocab_size, "prompt")};
  if (static_cast<int64_t>(p->size()) > ctx.limits.max_prompts)
    fail("prompt", "at most " + std::to_string(ctx.limits.max_prompts) + " prompts per request");
  std::vector<std::vector<int32_t>> prompts;
  for (const Body& e : *p) {
    if (e.is_string()) prompts.push_back(encode(ctx, e.get<std::string>(), true, "prompt"));
    else if (e.is_array()) prompts.push_back(token_list(e, ctx.vocab_size, "prompt"));
    else fail("prompt", "'prompt' list elements must be strings or lists of token ids");
  }
  return prompts;
}

// A message's content as the chat template expects it: a string (text parts joined by "\n", as vLLM does),
// or null (absent).
ordered_json message_content(const ordered_json* content, size_t i) {
  const std::string key = "messages[" + std::to_string(i) + "].content";
  if (!content || content->is_null()) return nullptr;
  if (content->is_string()) return *content;
  if (!content->is_array()) fail(key, "'" + key + "' must be a string or a list of content parts");
  std::string text;
  for (const ordered_json& part : *content) {
    const auto type = part.is_object() ? part.find("type") : part.end();
    const auto t = part.is_object() ? part.find("text") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || t == part.end() || !t->is_string())
      fail(key, "'" + key + "': only {\"type\": \"text\", \"text\": ...} parts are supported");
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

// tools / text: the request's tools (copied before they move into the template) and the rendered prompt.
std::vector<int32_t> parse_chat_prompt(Body& body, const ModelContext& ctx, ordered_json& tools, std::string& text) {
  const auto it = body.find("messages");
  if (it == body.end() || it->is_null()) fail("messages", "'messages' is required");
  if (!it->is_array() || it->empty()) fail("messages", "'messages' must be a non-empty list");
  ordered_json messages = ordered_json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    ordered_json& m = (*it)[i];
    const std::string key = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail(key, "'" + key + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string()) fail(key + ".role", "'" + key + ".role' must be a string");
    const std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      fail(key + ".role", "unknown role '" + role + "'");
    const auto c = m.find("content");
    ordered_json content = message_content(c == m.end() ? nullptr : &*c, i);
    if (content.is_null() && role != "assistant") fail(key + ".content", "'" + key + ".content' is required");
    // An assistant turn with only tool_calls has "content": null (the OpenAI SDKs send it so). Templates test
    // `'</think>' in message.content` (Qwen3), which fails on None; like vLLM, render it as the empty string.
    if (content.is_null()) content = "";
    ordered_json msg = std::move(m);  // moved, not copied: tool_calls and the like stay as they came
    msg["content"] = std::move(content);
    messages.push_back(std::move(msg));
  }
  chat::ChatTemplateOptions opt;
  if (const auto g = body.find("add_generation_prompt"); g != body.end() && !g->is_null()) {
    if (!g->is_boolean()) fail("add_generation_prompt", "'add_generation_prompt' must be a boolean");
    opt.add_generation_prompt = g->get<bool>();
  }
  if (const auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) fail("tools", "'tools' must be a list");
    tools = *t;
    opt.tools = std::move(*t);
  }
  opt.extra_context = ordered_json::object();
  if (const auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (auto& [name, value] : k->items()) {
      if (name == "enable_thinking") {
        if (!value.is_boolean()) fail("chat_template_kwargs", "'enable_thinking' must be a boolean");
        opt.enable_thinking = value.get<bool>();
      } else {
        opt.extra_context[name] = std::move(value);
      }
    }
  }
  try {
    text = ctx.engine->chat_template().render(messages, opt);
  } catch (const std::exception& e) {
    fail("messages", "chat template: " + user_message(e));
  }
  return encode(ctx, text, /*add_special=*/false, "messages");  // the template has the special tokens
}

std::vector<std::string> parse_stop(const Body& v, const ProtocolLimits& lim) {
  std::vector<std::string> stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const Body& s : v) {
      if (!s.is_string()) fail("stop", "'stop' must be a string or a list of strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    fail("stop", "'stop' must be a string or a list of strings");
  }
  if (static_cast<int64_t>(stop.size()) > lim.max_stop_strings)
    fail("stop", "at most " + std::to_string(lim.max_stop_strings) + " stop strings");
  for (const std::string& s : stop) {
    if (s.empty()) fail("stop", "stop strings must not be empty");
    if (static_cast<int64_t>(s.size()) > lim.max_stop_length)
      fail("stop", "stop strings are limited to " + std::to_string(lim.max_stop_length) + " bytes");
  }
  return stop;
}

// logit_bias, OpenAI's form: an object mapping token ids, as strings, to biases in [-100, 100].
std::map<int32_t, float> parse_logit_bias(const Body& v, int64_t vocab) {
  if (!v.is_object()) fail("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
  if (v.size() > kMaxLogitBiasEntries)
    fail("logit_bias", "'logit_bias' may bias at most " + std::to_string(kMaxLogitBiasEntries) + " tokens");
  std::map<int32_t, float> bias;
  for (const auto& [key, value] : v.items()) {
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    const long long id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= vocab)
      fail("logit_bias", "'logit_bias' key '" + key + "' is not a token id in [0, " + std::to_string(vocab) + ")");
    bias[static_cast<int32_t>(id)] = static_cast<float>(get_number(value, "logit_bias", -100, 100));
  }
  return bias;
}

void parse_sampling(const Body& body, Endpoint endpoint, const ModelContext& ctx, GenerationRequest& r) {
  SamplingParams& p = r.params;
  if (const Body* v = field(body, "temperature")) p.temperature = static_cast<float>(get_number(*v, "temperature", 0, 100));
  if (const Body* v = field(body, "top_p")) {
    p.top_p = static_cast<float>(get_number(*v, "top_p", 0, 1));
    if (p.top_p <= 0) fail("top_p", "'top_p' must be in (0, 1]");
  }
  if (const Body* v = field(body, "top_k")) p.top_k = get_int(*v, "top_k", -1, ctx.vocab_size);
  if (const Body* v = field(body, "min_p")) p.min_p = static_cast<float>(get_number(*v, "min_p", 0, 1));
  if (const Body* v = field(body, "presence_penalty"))
    p.presence_penalty = static_cast<float>(get_number(*v, "presence_penalty", -2, 2));
  if (const Body* v = field(body, "frequency_penalty"))
    p.frequency_penalty = static_cast<float>(get_number(*v, "frequency_penalty", -2, 2));
  if (const Body* v = field(body, "repetition_penalty")) {
    p.repetition_penalty = static_cast<float>(get_number(*v, "repetition_penalty", 0, 100));
    if (p.repetition_penalty <= 0) fail("repetition_penalty", "'repetition_penalty' must be > 0");
  }
  if (const Body* v = field(body, "seed")) {
    if (!v->is_number_integer()) fail("seed", "'seed' must be an integer");
    p.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
  }
  if (const Body* v = field(body, "ignore_eos")) p.ignore_eos = get_bool(*v, "ignore_eos");
  if (const Body* v = field(body, "min_tokens")) p.min_tokens = get_int(*v, "min_tokens", 0, ctx.max_model_len);
  if (const Body* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) fail("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (int32_t id : token_list(*v, ctx.vocab_size, "stop_token_ids")) p.stop_token_ids.push_back(id);
  }
  if (const Body* v = field(body, "logit_bias")) p.logit_bias = parse_logit_bias(*v, ctx.vocab_size);
  if (const Body* v = field(body, "stop")) r.stop = parse_stop(*v, ctx.limits);
  if (const Body* v = field(body, "n")) r.n = get_int(*v, "n", 1, ctx.limits.max_n);

  if (endpoint == Endpoint::kCompletions) {
    if (const Body* v = field(body, "logprobs")) {
      r.want_logprobs = true;
      r.top_logprobs = get_int(*v, "logprobs", 0, kMaxLogprobs);
    }
  } else {
    if (const Body* v = field(body, "logprobs")) r.want_logprobs = get_bool(*v, "logprobs");
    if (const Body* v = field(body, "top_logprobs")) {
      r.top_logprobs = get_int(*v, "top_logprobs", 0, kMaxLogprobs);
      if (!r.want_logprobs) fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  }
  // The engine returns the top-K list plus the sampled token; K >= 1 gives the sampled token's logprob.
  p.logprobs = r.want_logprobs ? std::max<int64_t>(1, r.top_logprobs) : 0;

  if (const Body* v = field(body, "stream")) r.stream = get_bool(*v, "stream");
  if (const Body* v = field(body, "stream_options")) {
    if (!v->is_object()) fail("stream_options", "'stream_options' must be an object");
    if (!r.stream) fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (const Body* u = field(*v, "include_usage")) r.include_usage = get_bool(*u, "include_usage");
  }
}

}  // namespace

GenerationRequest parse_generation_request(Endpoint endpoint, const std::string& body_text, const ModelContext& ctx) {
  const JsonShape shape = json_shape(body_text);
  if (shape.depth > kMaxJsonDepth)
    fail("", "the request body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                 " levels deep");
  if (shape.widest > kMaxJsonObjectKeys)
    fail("", "an object in the request body has more than " + std::to_string(kMaxJsonObjectKeys) +
                 " keys (the limit per object)");
  Body body;
  try {
    body = Body::parse(body_text);
  } catch (const std::exception& e) {
    fail("", std::string("invalid JSON body: ") + e.what());
  }
  if (!body.is_object()) fail("", "the request body must be a JSON object");
  check_parameters(body, endpoint);

  GenerationRequest r;
  r.endpoint = endpoint;
  if (const Body* m = field(body, "model")) {
    if (!m->is_string()) fail("model", "'model' must be a string");
    r.model = m->get<std::string>();
    bool known = false;
    for (const std::string& name : ctx.served_names) known |= name == r.model;
    if (!known)
      throw ApiException(ApiError::not_found("The model '" + r.model + "' does not exist.", "model_not_found"));
  }
  if (r.model.empty() && !ctx.served_names.empty()) r.model = ctx.served_names.front();

  parse_sampling(body, endpoint, ctx, r);
  ordered_json tools;
  std::string prompt_text;
  if (endpoint == Endpoint::kCompletions) r.prompts = parse_prompt(body, ctx);
  else r.prompts = {parse_chat_prompt(body, ctx, tools, prompt_text)};
  parse_structured_request(body, endpoint, ctx, tools, prompt_text, r);

  // max_tokens: OpenAI's default is 16 for completions; chat defaults to the rest of the context (as vLLM).
  const char* mt_name = "max_tokens";
  const Body* mt = endpoint == Endpoint::kChat ? field(body, "max_completion_tokens") : nullptr;
  if (mt) mt_name = "max_completion_tokens";
  else mt = field(body, "max_tokens");
  std::optional<int64_t> max_tokens;
  if (mt) max_tokens = get_int(*mt, mt_name, 1, std::numeric_limits<int64_t>::max());
  int64_t longest = 0;
  for (const auto& prompt : r.prompts) {
    if (prompt.empty()) fail(endpoint == Endpoint::kChat ? "messages" : "prompt", "the prompt is empty");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompt.size()));
  }
  if (longest >= ctx.max_model_len)
    fail(endpoint == Endpoint::kChat ? "messages" : "prompt",
         "This model's maximum context length is " + std::to_string(ctx.max_model_len) +
             " tokens, but the prompt has " + std::to_string(longest) + " tokens.");
  // What the whole request asks of the engine, over all its sequences (prompts x n). Each product is
  // compared by division, so no user number is ever multiplied (max_tokens may be 2^63 - 1).
  const int64_t sequences = r.num_choices();
  int64_t prompt_tokens = 0;
  for (const auto& prompt : r.prompts) prompt_tokens += static_cast<int64_t>(prompt.size());
  if (prompt_tokens > ctx.limits.max_request_prompt_tokens / r.n)
    fail(endpoint == Endpoint::kChat ? "messages" : "prompt",
         "this request's prompts hold " + std::to_string(prompt_tokens) + " tokens, " + std::to_string(r.n) +
             " times (n): more than the limit of " + std::to_string(ctx.limits.max_request_prompt_tokens) +
             " prompt tokens per request (--max-request-prompt-tokens)");
  // A token's logprobs cost as much as that many more tokens (the response lists each with its text).
  const int64_t weight = r.want_logprobs ? 1 + r.top_logprobs : 1;
  const std::string per_token = weight > 1 ? " with " + std::to_string(r.top_logprobs) + " top logprobs each" : "";
  const int64_t output_share = ctx.limits.max_request_output_tokens / (sequences * weight);  // per sequence
  if (output_share < 1)
    fail("n", "this request has " + std::to_string(sequences) + " sequences (prompts x n)" + per_token +
                  ": more than the limit of " + std::to_string(ctx.limits.max_request_output_tokens) +
                  " output tokens per request allows (--max-request-output-tokens)");
  if (max_tokens) {
    if (*max_tokens > ctx.max_model_len - longest)  // the sum is printed unsigned: it may pass 2^63
      fail(mt_name, "This model's maximum context length is " + std::to_string(ctx.max_model_len) +
                        " tokens. However, you requested " +
                        std::to_string(static_cast<uint64_t>(*max_tokens) + static_cast<uint64_t>(longest)) +
                        " tokens (" + std::to_string(longest) + " in the prompt, " + std::to_string(*max_tokens) +
                        " in the completion).");
    if (*max_tokens > output_share)
      fail(mt_name, "'" + std::string(mt_name) + "' " + std::to_string(*max_tokens) + " for each of " +
                        std::to_string(sequences) + " sequences (prompts x n)" + per_token +
                        " is more than the limit of " + std::to_string(ctx.limits.max_request_output_tokens) +
                        " output tokens per request (--max-request-output-tokens; at most " +
                        std::to_string(output_share) + " each)");
    r.params.max_tokens = *max_tokens;
  } else {
    r.params.max_tokens = endpoint == Endpoint::kChat ? ctx.max_model_len - longest
                                                      : std::min<int64_t>(16, ctx.max_model_len - longest);
    r.params.max_tokens = std::min(r.params.max_tokens, output_share);
  }
  if (r.params.min_tokens > r.params.max_tokens) fail("min_tokens", "'min_tokens' must be <= max_tokens");

  // Backstop: whatever else the engine would refuse.
  for (const auto& prompt : r.prompts) {
    try {
      ctx.engine->validate_request(prompt, r.params);
    } catch (const std::exception& e) {
      fail("", user_message(e));
    }
  }
  return r;
}

std::string token_display(const tokenizer::Tokenizer& tok, int32_t token) {
  const std::string_view b = tok.token_bytes(token);
  // Valid UTF-8?
  size_t i = 0;
  bool valid = true;
  while (i < b.size() && valid) {
    const auto c = static_cast<unsigned char>(b[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > b.size()) valid = false;
    for (size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(b[i + k]) >> 6) == 0x2;
    i += len;
  }
  if (valid) return std::string(b);
  std::string out = "bytes:";
  static const char* kHex = "0123456789abcdef";
  for (unsigned char c : b) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

namespace {

json token_bytes_json(const tokenizer::Tokenizer& tok, int32_t token) {
  json bytes = json::array();
  for (unsigned char c : tok.token_bytes(token)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

float sampled_logprob(int32_t token, const std::vector<TokenLogprob>& lps) {
  for (const TokenLogprob& t : lps)
    if (t.id == token) return t.logprob;
  return -9999.0f;  // never: the engine always lists the sampled token
}

}  // namespace

json chat_logprob_entry(const tokenizer::Tokenizer& tok, int32_t token, const std::vector<TokenLogprob>& lps,
                        int64_t top_logprobs) {
  json top = json::array();
  for (size_t i = 0; i < lps.size() && static_cast<int64_t>(i) < top_logprobs; ++i)
    top.push_back({{"token", token_display(tok, static_cast<int32_t>(lps[i].id))},
                   {"logprob", lps[i].logprob},
                   {"bytes", token_bytes_json(tok, static_cast<int32_t>(lps[i].id))}});
  return {{"token", token_display(tok, token)},
          {"logprob", sampled_logprob(token, lps)},
          {"bytes", token_bytes_json(tok, token)},
          {"top_logprobs", std::move(top)}};
}

json empty_completion_logprobs() {
  return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

void append_completion_logprob(json& logprobs, const tokenizer::Tokenizer& tok, int32_t token,
                               const std::vector<TokenLogprob>& lps, int64_t top_logprobs, int64_t text_offset) {
  logprobs["tokens"].push_back(token_display(tok, token));
  logprobs["token_logprobs"].push_back(sampled_logprob(token, lps));
  json top = json::object();
  for (size_t i = 0; i < lps.size() && static_cast<int64_t>(i) < top_logprobs; ++i)
    top[token_display(tok, static_cast<int32_t>(lps[i].id))] = lps[i].logprob;
  logprobs["top_logprobs"].push_back(top_logprobs > 0 ? top : json(nullptr));
  logprobs["text_offset"].push_back(text_offset);
}

const char* finish_reason_string(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    default: return "stop";
  }
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace nanovllm::server
