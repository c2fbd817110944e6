// ChatOutputParser: one chat choice's generated text -> reasoning_content, content and tool calls, as the
// request's ChatOutputOptions say (reasoning_parser.h first, then tool_parser.h on what is not reasoning).
// Streaming and whole answers go through the same feed()/finish() path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/server/reasoning_parser.h"
#include "nanovllm/server/tool_parser.h"

namespace nanovllm::server {

struct ChatOutputOptions {
  ToolParserKind tool_parser = ToolParserKind::kNone;  // kNone: tool calls stay text
  nlohmann::ordered_json tools;                        // the request's tools (qwen3_coder reads their types)
  bool reasoning = false;                              // --reasoning-parser qwen3
  bool starts_in_reasoning = false;                    // the prompt opened <think>
  bool active() const { return reasoning || tool_parser != ToolParserKind::kNone; }
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class ChatOutputParser {
 public:
  ChatOutputParser(const ChatOutputOptions& options, std::function<std::string()> new_id);
  ChatDelta feed(std::string_view text);
  ChatDelta finish();
  int64_t num_calls() const { return tools_ ? tools_->num_calls() : 0; }

 private:
  void add_content(std::string_view text, bool final, ChatDelta& out);
  std::unique_ptr<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
};

// A delta's tool calls in OpenAI's stream form: [{index, id, type, function: {name, arguments}}, ...].
nlohmann::json tool_call_deltas_json(const std::vector<ToolCallDelta>& calls);

}  // namespace nanovllm::server
