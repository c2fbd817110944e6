#include "nanovllm/chat/chat_template.h"

#include <ctime>
#include <fstream>
#include <sstream>

#include "nanovllm/chat/jinja_ast.h"
#include "nanovllm/chat/jinja_interp.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NANOVLLM_CHECK(in.good(), "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: a string, an AddedToken object {"content": ...}, or null.
std::string token_string(const nlohmann::ordered_json& cfg, const char* key, const std::filesystem::path& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return "";
  const auto& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  NANOVLLM_CHECK(t.is_object() && t.contains("content") && t["content"].is_string(), path.string(), ": '", key,
                 "' must be a string or an object with a string 'content'");
  return t["content"].get<std::string>();
}

jinja::Value strftime_now(jinja::CallArgs& a) {
  if (a.args.size() != 1 || !a.args[0].is_string() || !a.kwargs.empty())
    throw jinja::TemplateError("strftime_now() takes exactly one string argument");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof(buf), a.args[0].str().c_str(), &local);
  return jinja::Value(std::string(buf, n));
}

jinja::Value make_namespace(jinja::CallArgs& a) {
  auto ns = std::make_shared<jinja::Namespace>();
  for (const auto& init : a.args) {
    if (!init.is_dict()) throw jinja::TemplateError("namespace() positional arguments must be dicts");
    for (const auto& kv : init.dict()) ns->attrs.push_back(kv);
  }
  for (const auto& [k, v] : a.kwargs) {
    bool replaced = false;
    for (auto& [nk, nv] : ns->attrs) {
      if (nk == k) {
        nv = v;
        replaced = true;
      }
    }
    if (!replaced) ns->attrs.emplace_back(k, v);
  }
  return jinja::Value(ns);
}

jinja::Value range(jinja::CallArgs& a) {
  if (!a.kwargs.empty() || a.args.empty() || a.args.size() > 3) throw jinja::TemplateError("range() takes 1 to 3 integer arguments");
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!a.args[i].is_int()) throw jinja::TemplateError("range() arguments must be integers");
  if (a.args.size() == 1) {
    v[1] = a.args[0].as_int();
  } else {
    v[0] = a.args[0].as_int();
    v[1] = a.args[1].as_int();
    if (a.args.size() == 3) v[2] = a.args[2].as_int();
  }
  if (v[2] == 0) throw jinja::TemplateError("range() arg 3 must not be zero");
  jinja::List out;
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
    out.emplace_back(i);
    if (out.size() > 1'000'000) throw jinja::TemplateError("range() too large");
  }
  return jinja::Value(std::move(out));
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& tokenizer_config_json) {
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(read_file(tokenizer_config_json));
  } catch (const nlohmann::json::exception& e) {
    NANOVLLM_FAIL(tokenizer_config_json.string(), ": invalid JSON: ", e.what());
  }
  NANOVLLM_CHECK(cfg.is_object(), tokenizer_config_json.string(), ": expected a JSON object");
  std::string source;
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const auto& t = cfg["chat_template"];
    if (t.is_string()) {
      source = t.get<std::string>();
    } else {
      NANOVLLM_CHECK(t.is_array(), tokenizer_config_json.string(), ": 'chat_template' must be a string or a list");
      for (const auto& entry : t) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string())
          source = entry["template"].get<std::string>();
      }
      NANOVLLM_CHECK(!source.empty(), tokenizer_config_json.string(),
                     ": 'chat_template' list has no entry named 'default'");
    }
  } else {
    const auto sibling = tokenizer_config_json.parent_path() / "chat_template.jinja";
    NANOVLLM_CHECK(std::filesystem::exists(sibling), tokenizer_config_json.string(),
                   " has no 'chat_template' and there is no ", sibling.string());
    source = read_file(sibling);
  }
  return ChatTemplate(std::move(source), token_string(cfg, "bos_token", tokenizer_config_json),
                      token_string(cfg, "eos_token", tokenizer_config_json));
}

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      program_(jinja::parse_template(source_)) {}

std::string ChatTemplate::render(const nlohmann::json& messages, const ChatTemplateOptions& opt) const {
  return render(nlohmann::ordered_json(messages), opt);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& opt) const {
  NANOVLLM_CHECK(messages.is_array(), "chat template: messages must be a JSON array, got ", messages.type_name());
  NANOVLLM_CHECK(opt.tools.is_null() || opt.tools.is_array(), "chat template: tools must be null or an array");
  NANOVLLM_CHECK(opt.extra_context.is_null() || opt.extra_context.is_object(),
                 "chat template: extra_context must be null or an object");
  // Same variables transformers passes: special tokens, then messages/tools/documents/
  // add_generation_prompt, then the caller's kwargs (enable_thinking, extra context).
  jinja::Context ctx;
  ctx["raise_exception"] = jinja::Value(jinja::Callable{"raise_exception", [](jinja::CallArgs& a) -> jinja::Value {
                                                          const std::string msg = a.args.empty() ? "" : jinja::to_str(a.args[0]);
                                                          throw jinja::TemplateError(msg, /*raised=*/true);
                                                        }});
  ctx["strftime_now"] = jinja::Value(jinja::Callable{"strftime_now", strftime_now});
  ctx["namespace"] = jinja::Value(jinja::Callable{"namespace", make_namespace});
  ctx["range"] = jinja::Value(jinja::Callable{"range", range});
  ctx["dict"] = jinja::Value(jinja::Callable{"dict", [](jinja::CallArgs& a) -> jinja::Value {
                                               if (!a.args.empty()) throw jinja::TemplateError("dict() takes keyword arguments only");
                                               jinja::Dict d(a.kwargs.begin(), a.kwargs.end());
                                               return jinja::Value(std::move(d));
                                             }});
  if (!bos_token_.empty()) ctx["bos_token"] = jinja::Value(bos_token_);
  if (!eos_token_.empty()) ctx["eos_token"] = jinja::Value(eos_token_);
  ctx["messages"] = jinja::from_json(messages);
  ctx["tools"] = jinja::from_json(opt.tools);
  ctx["documents"] = jinja::Value(jinja::None{});
  ctx["add_generation_prompt"] = jinja::Value(opt.add_generation_prompt);
  if (opt.enable_thinking) ctx["enable_thinking"] = jinja::Value(*opt.enable_thinking);
  if (opt.extra_context.is_object())
    for (auto it = opt.extra_context.begin(); it != opt.extra_context.end(); ++it)
      ctx[it.key()] = jinja::from_json(it.value());
  return jinja::render_program(*program_, std::move(ctx));
}

}  // namespace nanovllm::chat
