#include "nanovllm/server/chat_output.h"

namespace nanovllm::server {

ChatOutputParser::ChatOutputParser(const ChatOutputOptions& options, std::function<std::string()> new_id) {
  if (options.reasoning) reasoning_ = std::make_unique<ReasoningParser>(options.starts_in_reasoning);
  if (options.tool_parser != ToolParserKind::kNone)
    tools_ = make_tool_parser(options.tool_parser, options.tools, std::move(new_id));
}

void ChatOutputParser::add_content(std::string_view text, bool final, ChatDelta& out) {
  if (!tools_) {
    out.content += text;
    return;
  }
  ToolParseOutput t = tools_->feed(text);
  if (final) t.append(tools_->finish());
  out.content += t.content;
  for (ToolCallDelta& d : t.calls) out.calls.push_back(std::move(d));
}

ChatDelta ChatOutputParser::feed(std::string_view text) {
  ChatDelta out;
  if (!reasoning_) {
    add_content(text, false, out);
    return out;
  }
  ReasoningParser::Piece p = reasoning_->feed(text);
  out.reasoning = std::move(p.reasoning);
  add_content(p.content, false, out);
  return out;
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta out;
  std::string rest;
  if (reasoning_) {
    ReasoningParser::Piece p = reasoning_->finish();
    out.reasoning = std::move(p.reasoning);
    rest = std::move(p.content);
  }
  add_content(rest, true, out);
  return out;
}

nlohmann::json tool_call_deltas_json(const std::vector<ToolCallDelta>& calls) {
  nlohmann::json arr = nlohmann::json::array();
  for (const ToolCallDelta& d : calls) {
    // Pieces of one call in a row travel as one entry.
    if (!arr.empty() && arr.back()["index"] == d.index && !d.id) {
      arr.back()["function"]["arguments"] = arr.back()["function"]["arguments"].get<std::string>() + d.arguments;
      continue;
    }
    nlohmann::json e = {{"index", d.index}};
    if (d.id) {
      e["id"] = *d.id;
      e["type"] = "function";
    }
    nlohmann::json f = nlohmann::json::object();
    if (d.name) f["name"] = *d.name;
    f["arguments"] = d.arguments;
    e["function"] = std::move(f);
    arr.push_back(std::move(e));
  }
  return arr;
}

}  // namespace nanovllm::server
