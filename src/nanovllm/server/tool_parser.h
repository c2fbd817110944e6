// Tool-call parsers: a chat answer's text -> content and OpenAI tool calls (vLLM's --tool-call-parser).
//
//   hermes       Qwen3, Qwen2.5, Hermes:  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   qwen3_coder  Qwen3-Coder:             <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
//                                         </function>\n</tool_call>   (values typed by the tool's schema)
//
// Several calls per answer; text before a call stays content (whitespace right after a call is dropped).
// Streaming as OpenAI streams: a call's first delta carries its index, id, type and name, later deltas
// pieces of its arguments (a JSON string). feed() returns what is known so far, holding back text that may
// be the start of a tag; finish() ends the answer. A tag whose inside is not a valid call (malformed JSON, a
// missing name) is returned as content, never an error. When the whole call is in hand before anything of it
// was sent (a non-streamed answer) it is checked whole first; a streamed call is sent as its JSON is checked
// byte by byte, so a call that turns malformed after its name was sent ends there and the rest of its text
// becomes content. An answer cut off inside a call (max_tokens) keeps what was sent of the call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm::server {

enum class ToolParserKind { kNone, kHermes, kQwen3Coder };

// "hermes" / "qwen3_coder" / "none"; nullopt for anything else.
std::optional<ToolParserKind> tool_parser_from_name(std::string_view name);
const char* tool_parser_name(ToolParserKind kind);
// The parser a chat template's tool-call format calls for: qwen3_coder for <function=...><parameter=...>,
// hermes for <tool_call> JSON, else none.
ToolParserKind tool_parser_for_template(std::string_view chat_template_source);

struct ToolCallDelta {
  int64_t index = 0;
  std::optional<std::string> id, name;  // the call's first delta only
  std::string arguments;                // a piece of the arguments JSON string
};

struct ToolParseOutput {
  std::string content;
  std::vector<ToolCallDelta> calls;
  void append(ToolParseOutput&& o);
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  ToolParseOutput feed(std::string_view text) {
    buf_ += text;
    ToolParseOutput out;
    run(out, false);
    return out;
  }
  ToolParseOutput finish() {
    ToolParseOutput out;
    run(out, true);
    return out;
  }
  int64_t num_calls() const { return num_calls_; }

 protected:
  // Consumes what it can of buf_ into `out`; `final`: no more text comes (a partial tag is text).
  virtual void run(ToolParseOutput& out, bool final) = 0;

  std::string buf_;  // the text fed and not yet consumed
  int64_t num_calls_ = 0;
};

// tools: the request's `tools` (OpenAI form; qwen3_coder reads the parameter types); new_id: ids for calls
// ("call_..."). kind must not be kNone.
std::unique_ptr<ToolCallParser> make_tool_parser(ToolParserKind kind, const nlohmann::ordered_json& tools,
                                                 std::function<std::string()> new_id);

}  // namespace nanovllm::server
