#include "nanovllm/server/structured_request.h"

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/grammar.h"
#include "nanovllm/grammar/json_schema.h"
#include "nanovllm/grammar/regex.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/llm/structured_output.h"
#include "nanovllm/server/api_error.h"
#include "nanovllm/server/reasoning_parser.h"

namespace nanovllm::server {
namespace {

using Body = nlohmann::ordered_json;
using grammar::Expr;
using grammar::Grammar;

[[noreturn]] void fail(const std::string& param, const std::string& message) {
  throw ApiException(ApiError::bad_request(message, param));
}

const Body* field(const Body& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// A schema given as an object or as JSON text.
std::string schema_text(const Body& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v.dump(-1, ' ', false, Body::error_handler_t::replace);
  if (v.is_string()) return v.get<std::string>();
  fail(param, "'" + param + "' must be a JSON Schema (an object or its JSON text)");
}

std::string string_field(const Body& v, const std::string& param) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) fail(param, "'" + param + "' must be a non-empty string");
  return v.get<std::string>();
}

std::vector<std::string> choice_list(const Body& v, const std::string& param) {
  if (!v.is_array() || v.empty()) fail(param, "'" + param + "' must be a non-empty list of strings");
  std::vector<std::string> out;
  for (const Body& c : v) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty()) fail(param, "'" + param + "' must list non-empty strings");
    out.push_back(c.get<std::string>());
  }
  return out;
}

// Sets `so` from one of the request's constraint fields; returns the field's name ("" when none is given).
std::string parse_constraint_fields(const Body& body, StructuredOutputsParams& so) {
  std::vector<std::string> given;
  if (const Body* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      fail("response_format", "'response_format' must be an object with a 'type'");
    const std::string type = (*rf)["type"];
    if (type == "json_object") {
      so.json_object = true;
      given.push_back("response_format");
    } else if (type == "json_schema") {
      const Body* js = field(*rf, "json_schema");
      if (!js || !js->is_object()) fail("response_format", "'response_format.json_schema' must be an object");
      for (const auto& [k, v] : js->items())
        if (k != "name" && k != "schema" && k != "strict" && k != "description")
          fail("response_format", "'response_format.json_schema." + k + "' is not supported");
      const Body* schema = field(*js, "schema");
      if (!schema) fail("response_format", "'response_format.json_schema.schema' is required");
      if (const Body* strict = field(*js, "strict"); strict && !strict->is_boolean())
        fail("response_format", "'response_format.json_schema.strict' must be a boolean");
      so.json = schema_text(*schema, "response_format");
      given.push_back("response_format");
    } else if (type != "text") {
      fail("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
  }
  if (const Body* s = field(body, "structured_outputs")) {
    if (!s->is_object()) fail("structured_outputs", "'structured_outputs' must be an object");
    int kinds = 0;
    for (const auto& [k, v] : s->items()) {
      if (v.is_null()) continue;
      const std::string param = "structured_outputs." + k;
      if (k == "json") {
        so.json = schema_text(v, param);
      } else if (k == "regex") {
        so.regex = string_field(v, param);
      } else if (k == "choice") {
        so.choice = choice_list(v, param);
      } else if (k == "grammar") {
        so.grammar = string_field(v, param);
      } else if (k == "json_object") {
        if (!v.is_boolean()) fail(param, "'" + param + "' must be a boolean");
        if (!v.get<bool>()) continue;
        so.json_object = true;
      } else {
        fail(param, "'" + param + "' is not supported");
      }
      ++kinds;
    }
    if (kinds != 1) fail("structured_outputs", "'structured_outputs' must give exactly one of json, regex, choice, grammar, json_object");
    given.push_back("structured_outputs");
  }
  if (const Body* v = field(body, "guided_json")) {
    so.json = schema_text(*v, "guided_json");
    given.push_back("guided_json");
  }
  if (const Body* v = field(body, "guided_regex")) {
    so.regex = string_field(*v, "guided_regex");
    given.push_back("guided_regex");
  }
  if (const Body* v = field(body, "guided_choice")) {
    so.choice = choice_list(*v, "guided_choice");
    given.push_back("guided_choice");
  }
  if (const Body* v = field(body, "guided_grammar")) {
    so.grammar = string_field(*v, "guided_grammar");
    given.push_back("guided_grammar");
  }
  if (given.size() > 1) fail(given[1], "'" + given[0] + "' and '" + given[1] + "' both constrain the output; give one");
  return given.empty() ? "" : given[0];
}

// The text of a Qwen3-Coder string parameter: anything without `stop` in it. `stop`'s first character
// appears nowhere else in it, so: split the text at that character; no piece after a split may start with
// the rest of `stop`.
Expr text_without(std::string_view stop) {
  const uint32_t first = static_cast<unsigned char>(stop[0]);
  const std::string_view rest = stop.substr(1);
  auto not_these = [](std::initializer_list<uint32_t> cs) {
    grammar::CodepointRanges r;
    for (uint32_t c : cs) r.emplace_back(c, c);
    return Expr::cls(grammar::complement_ranges(grammar::normalize_ranges(r)));
  };
  const Expr free = Expr::star(not_these({first}));
  // piece(k): what may follow `first` + rest[0, k): end, break off, or go on (never complete `stop`).
  Expr piece = Expr::alt({Expr::empty(), Expr::seq({not_these({first, static_cast<unsigned char>(rest.back())}), free})});
  for (size_t k = rest.size() - 1; k-- > 0;) {
    const auto c = static_cast<unsigned char>(rest[k]);
    piece = Expr::alt({Expr::empty(), Expr::seq({not_these({first, c}), free}),
                       Expr::seq({Expr::literal(std::string(1, rest[k])), std::move(piece)})});
  }
  return Expr::seq({free, Expr::star(Expr::seq({Expr::literal(std::string(1, stop[0])), std::move(piece)}))});
}

const Body* tool_function(const Body& tool) {
  if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) return nullptr;
  const Body& f = tool["function"];
  if (!f.contains("name") || !f["name"].is_string()) return nullptr;
  return &f;
}

Body tool_parameters(const Body& f) {
  if (f.contains("parameters") && !f["parameters"].is_null()) return f["parameters"];
  return Body{{"type", "object"}, {"properties", Body::object()}};
}

// One Qwen3-Coder call to `f`: its parameters in schema order, required ones always, others optional.
Expr coder_call(Grammar& g, const Body& f) {
  const std::string name = f["name"];
  const Body params = tool_parameters(f);
  std::vector<Expr> parts = {Expr::literal("<tool_call>\n<function=" + name + ">\n")};
  if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
    std::vector<std::string> required;
    if (params.contains("required") && params["required"].is_array())
      for (const Body& r : params["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    for (const auto& [pname, ps] : params["properties"].items()) {
      Expr value;
      const bool is_string = ps.is_object() && ps.contains("type") && ps["type"] == "string";
      if (is_string && ps.contains("enum") && ps["enum"].is_array()) {
        std::vector<Expr> alts;
        for (const Body& e : ps["enum"])
          if (e.is_string()) alts.push_back(Expr::literal(e.get<std::string>()));
        NANOVLLM_CHECK(!alts.empty(), "tool '", name, "' parameter '", pname, "': enum lists no string");
        value = Expr::alt(std::move(alts));
      } else if (is_string && ps.contains("pattern") && ps["pattern"].is_string()) {
        value = grammar::parse_regex(ps["pattern"].get<std::string>());
      } else if (is_string) {
        value = text_without("</parameter>");
      } else {
        value = Expr::ref(g.import(grammar::json_schema_grammar(ps)));
      }
      Expr item = Expr::seq({Expr::literal("<parameter=" + pname + ">\n"), std::move(value), Expr::literal("\n</parameter>\n")});
      const bool req = std::find(required.begin(), required.end(), pname) != required.end();
      parts.push_back(req ? std::move(item) : Expr::optional(std::move(item)));
    }
  }
  parts.push_back(Expr::literal("</function>\n</tool_call>"));
  return Expr::seq(std::move(parts));
}

}  // namespace

std::string tool_call_grammar(ToolParserKind kind, const Body& tools, const std::vector<std::string>& names,
                              int max_calls) {
  NANOVLLM_CHECK(kind != ToolParserKind::kNone, "no tool-call format to constrain");
  Grammar g;
  const int32_t root = g.add_rule("root");
  g.set_root(root);
  const int32_t call = g.add_rule("tool-call");
  std::vector<const Body*> chosen;
  for (const Body& t : tools) {
    const Body* f = tool_function(t);
    if (!f) continue;
    if (names.empty() || std::find(names.begin(), names.end(), (*f)["name"].get<std::string>()) != names.end())
      chosen.push_back(f);
  }
  NANOVLLM_CHECK(!chosen.empty(), "no tool to call");
  if (kind == ToolParserKind::kHermes) {
    Body any_of = Body::array();
    for (const Body* f : chosen)
      any_of.push_back({{"type", "object"},
                        {"properties", {{"name", {{"const", (*f)["name"]}}}, {"arguments", tool_parameters(*f)}}},
                        {"required", {"name", "arguments"}},
                        {"additionalProperties", false}});
    const Body schema = any_of.size() == 1 ? any_of[0] : Body{{"anyOf", any_of}};
    const int32_t object = g.import(grammar::json_schema_grammar(schema));
    g.set_body(call, Expr::seq({Expr::literal("<tool_call>\n"), Expr::ref(object), Expr::literal("\n</tool_call>")}));
  } else {
    std::vector<Expr> alts;
    for (const Body* f : chosen) alts.push_back(coder_call(g, *f));
    g.set_body(call, Expr::alt(std::move(alts)));
  }
  g.set_body(root, Expr::seq({Expr::ref(call), Expr::repeat(Expr::seq({Expr::literal("\n"), Expr::ref(call)}), 0,
                                                                       max_calls < 0 ? -1 : max_calls - 1)}));
  return g.to_ebnf();
}

void parse_structured_request(const Body& body, Endpoint endpoint, const ModelContext& ctx, const Body& tools,
                              const std::string& prompt_text, GenerationRequest& r) {
  StructuredOutputsParams so;
  const std::string constraint_field = parse_constraint_fields(body, so);
  const bool chat = endpoint == Endpoint::kChat;
  const bool has_tools = tools.is_array() && !tools.empty();

  // tool_choice: "none" leaves tool calls as text; "auto" parses them; "required" and a named function
  // force them with a grammar.
  std::string choice = has_tools ? "auto" : "none";
  std::string named;
  if (const Body* tc = chat ? field(body, "tool_choice") : nullptr) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a named function");
    } else if (tc->is_object() && tc->value("type", "") == "function" && tc->contains("function") &&
               (*tc)["function"].is_object() && (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      choice = "named";
      named = (*tc)["function"]["name"].get<std::string>();
    } else {
      fail("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if ((choice == "required" || choice == "named") && !has_tools)
      fail("tool_choice", "'tool_choice' \"" + choice + "\" needs 'tools'");
  }
  bool parallel = true;
  if (const Body* p = chat ? field(body, "parallel_tool_calls") : nullptr) {
    if (!p->is_boolean()) fail("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    parallel = p->get<bool>();
  }
  if (has_tools && choice != "none") {
    if (ctx.tool_parser == ToolParserKind::kNone && (choice == "required" || choice == "named"))
      fail("tool_choice", "this model's chat template has no tool-call format the server knows; start it with "
                          "--tool-call-parser hermes|qwen3_coder");
    r.output.tool_parser = ctx.tool_parser;
    r.output.tools = tools;
  }
  if (choice == "required" || choice == "named") {
    if (!constraint_field.empty())
      fail("tool_choice", "'tool_choice' \"" + choice + "\" and '" + constraint_field + "' both constrain the output");
    std::vector<std::string> names;
    if (choice == "named") {
      bool found = false;
      for (const Body& t : tools)
        if (const Body* f = tool_function(t); f && (*f)["name"] == named) found = true;
      if (!found) fail("tool_choice", "'tool_choice' names '" + named + "', which is not in 'tools'");
      names.push_back(named);
    }
    try {
      so.grammar = tool_call_grammar(ctx.tool_parser, tools, names, choice == "named" || !parallel ? 1 : -1);
    } catch (const Error& e) {
      fail("tools", "tools: " + e.message());
    }
  }

  // Reasoning (chat with --reasoning-parser): thinking is off when the prompt closed an empty think block
  // (enable_thinking=false); it is already open when the prompt ends inside one (thinking-only models).
  if (chat && ctx.reasoning_parser) {
    const std::string_view tail = [&] {
      std::string_view t = prompt_text;
      while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\t' || t.back() == '\r')) t.remove_suffix(1);
      return t;
    }();
    const bool thinking_off = tail.ends_with(ReasoningParser::kEndTag);
    r.output.reasoning = true;
    r.output.starts_in_reasoning = tail.ends_with(ReasoningParser::kStartTag);
    if (!thinking_off) {
      so.reasoning_start = std::string(ReasoningParser::kStartTag);
      so.reasoning_end = std::string(ReasoningParser::kEndTag);
      so.reasoning_open = r.output.starts_in_reasoning;
    }
  }
  if (so.num_kinds() > 0) {
    // Compiled here, on the parse pool, so the engine thread finds it cached and a schema the grammar
    // engine does not support is a 400 naming the field and the keyword.
    try {
      ctx.engine->structured_outputs().compile(so);
    } catch (const std::exception& e) {
      fail(constraint_field.empty() ? "tools" : constraint_field, user_message(e));
    }
    r.params.structured_outputs = std::move(so);
  }
}

}  // namespace nanovllm::server
