// ReasoningParser: splits a chat answer into reasoning_content and content (vLLM's `--reasoning-parser
// qwen3`). Qwen3 reasons inside <think> ... </think> before answering; the tags go, the reasoning is the text
// between them, the content what follows (its leading newlines dropped). An answer that does not open with
// <think> (enable_thinking=false renders an empty think block into the prompt) is all content; an answer
// whose prompt already opened <think> (thinking-only models) starts inside the reasoning.
//
// Streaming: feed() takes text as it is generated and returns what can be told apart so far, holding back
// only a piece that may be the start of a tag; finish() flushes it. The concatenation of every output equals
// the parse of the whole text at once.
#pragma once

#include <string>
#include <string_view>

namespace nanovllm::server {

class ReasoningParser {
 public:
  static constexpr std::string_view kStartTag = "<think>";
  static constexpr std::string_view kEndTag = "</think>";

  explicit ReasoningParser(bool starts_in_reasoning = false)
      : state_(starts_in_reasoning ? State::kReasoningStart : State::kStart) {}

  struct Piece {
    std::string reasoning, content;
  };
  Piece feed(std::string_view text);
  Piece finish();
  bool in_reasoning() const { return state_ == State::kReasoning || state_ == State::kReasoningStart; }

 private:
  enum class State { kStart, kReasoningStart, kReasoning, kContentStart, kContent };
  void run(Piece& out, bool final);
  State state_;
  std::string held_;
};

// The longest suffix of `text` that is a proper prefix of `tag` (text that may yet become the tag).
size_t partial_tag_suffix(std::string_view text, std::string_view tag);

}  // namespace nanovllm::server
