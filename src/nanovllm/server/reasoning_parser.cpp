#include "nanovllm/server/reasoning_parser.h"

#include <algorithm>

namespace nanovllm::server {

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

ReasoningParser::Piece ReasoningParser::feed(std::string_view text) {
  held_ += text;
  Piece out;
  run(out, false);
  return out;
}

ReasoningParser::Piece ReasoningParser::finish() {
  Piece out;
  run(out, true);
  return out;
}

void ReasoningParser::run(Piece& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // Whitespace before <think> is part of neither; anything else first means there is no reasoning.
        const size_t first = held_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) {
          if (!final) return;
          state_ = State::kContent;
          continue;
        }
        const std::string_view rest = std::string_view(held_).substr(first);
        if (rest.starts_with(kStartTag)) {
          held_.erase(0, first + kStartTag.size());
          state_ = State::kReasoningStart;
          continue;
        }
        if (!final && kStartTag.starts_with(rest)) return;  // may still become <think>
        state_ = State::kContent;
        continue;
      }
      case State::kReasoningStart:
      case State::kContentStart: {
        const size_t first = held_.find_first_not_of('\n');
        if (first == std::string::npos) {
          held_.clear();
          return;
        }
        held_.erase(0, first);
        state_ = state_ == State::kReasoningStart ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t end = held_.find(kEndTag);
        if (end != std::string::npos) {
          out.reasoning += held_.substr(0, end);
          held_.erase(0, end + kEndTag.size());
          state_ = State::kContentStart;
          continue;
        }
        const size_t keep = final ? 0 : partial_tag_suffix(held_, kEndTag);
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case State::kContent:
        out.content += held_;
        held_.clear();
        return;
    }
  }
}

}  // namespace nanovllm::server
