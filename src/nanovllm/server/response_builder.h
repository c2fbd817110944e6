// ResponseBuilder: turns a request's ChoiceEvents into OpenAI JSON — stream chunks (chat: a role chunk per
// choice first, content deltas, a finish chunk per choice, a usage chunk when asked) or, for a
// non-streamed request, the final response with every choice's text, logprobs and usage. With a reasoning
// or tool-call parser (chat_output.h) the text becomes reasoning_content, content and tool_calls, and an
// answer that called tools finishes with "tool_calls".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/server/chat_output.h"
#include "nanovllm/server/engine_loop.h"
#include "nanovllm/server/protocol.h"

namespace nanovllm::server {

class ResponseBuilder {
 public:
  ResponseBuilder(const GenerationRequest& request, const tokenizer::Tokenizer& tok, std::string id, int64_t created);

  // Streaming.
  std::vector<nlohmann::json> start_chunks();  // chat: {"delta": {"role": "assistant", "content": ""}} per choice
  std::vector<nlohmann::json> chunks(const std::vector<ChoiceEvent>& events);
  nlohmann::json usage_chunk() const;  // {"choices": [], "usage": {...}}

  // Non-streamed: accumulate, then build.
  void add(const std::vector<ChoiceEvent>& events);
  nlohmann::json final_response() const;

  nlohmann::json usage() const;

 private:
  struct ChoiceState {
    std::string text;  // content (with a chat output parser: what it left as content)
    int64_t num_tokens = 0;
    FinishReason finish_reason = FinishReason::kNone;
    nlohmann::json logprobs;  // chat: list of entries; completions: {tokens, token_logprobs, ...}
    // Chat with reasoning / tool-call parsing (GenerationRequest::output).
    std::unique_ptr<ChatOutputParser> parser;
    std::string reasoning;
    nlohmann::json tool_calls = nlohmann::json::array();  // whole calls, merged from the deltas
    int64_t next_call_id = 0;
  };
  nlohmann::json chunk_base() const;
  // Updates the choice's state with `e`; returns this event's logprobs JSON (null when not asked for) and,
  // with a parser, what the event's text parsed to.
  nlohmann::json absorb(const ChoiceEvent& e, ChatDelta* delta = nullptr);
  const char* finish_reason_of(const ChoiceState& c) const;  // "tool_calls" when calls ended the answer

  const GenerationRequest& request_;
  const tokenizer::Tokenizer& tok_;
  std::string id_;
  int64_t created_;
  int64_t prompt_tokens_ = 0;
  std::vector<ChoiceState> choices_;
};

}  // namespace nanovllm::server
