// ResponseBuilder: turns a request's ChoiceEvents into OpenAI JSON — stream chunks (chat: a role chunk per
// choice first, content deltas, a finish chunk per choice, a usage chunk when asked) or, for a
// non-streamed request, the final response with every choice's text, logprobs and usage. With a reasoning
// or tool-call parser (chat_output.h) the text becomes reasoning_content, content and tool_calls, and an
// answer that called tools finishes with "tool_calls".
// Memory: a stream keeps nothing of what it has sent (counts and offsets only); a non-streamed request
// keeps its logprobs as the engine gave them (8 bytes an entry) and makes their JSON (~10 KB a token at
// top_logprobs 20 as a DOM) one token at a time while it writes the response text.
#pragma once

#include <cstdint>
#include <memory>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/server/chat_output.h"
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

  // Non-streamed: accumulate, then build (the response body's JSON text).
  void add(const std::vector<ChoiceEvent>& events);
  std::string final_response() const;

  nlohmann::json usage() const;

 private:
  struct CompactLogprob {
    int32_t id = 0;
    float logprob = 0;
  };
  struct TokenRecord {  // one generated token's logprobs: entries [first, first + count) of its choice
    int32_t token = 0;
    uint32_t count = 0;
    size_t first = 0;
    int64_t text_offset = 0;  // completions: the token's text offset
  };
  struct ChoiceState {
    std::string text;         // non-streamed only (a stream sends it as it comes); with a parser: the content
    int64_t text_bytes = 0;   // of the raw text so far (completions' text_offset)
    int64_t num_tokens = 0;
    FinishReason finish_reason = FinishReason::kNone;
    std::vector<TokenRecord> tokens;       // non-streamed, with logprobs
    std::vector<CompactLogprob> entries;
    // Chat with reasoning / tool-call parsing (GenerationRequest::output); reasoning and tool_calls are
    // kept for a non-streamed request only.
    std::unique_ptr<ChatOutputParser> parser;
    std::string reasoning;
    nlohmann::json tool_calls = nlohmann::json::array();  // whole calls, merged from the deltas
    int64_t next_call_id = 0;
  };
  nlohmann::json chunk_base() const;
  // Updates the choice's state with `e`. Streaming: returns this event's logprobs JSON (null when not asked
  // for) and keeps nothing of it; else keeps the text and the logprobs (compact) and returns null. With a
  // parser, `delta` receives what the event's text parsed to.
  nlohmann::json absorb(const ChoiceEvent& e, bool streaming, ChatDelta* delta = nullptr);
  std::string logprobs_text(const ChoiceState& c) const;  // a choice's "logprobs" value, as JSON text
  const char* finish_reason_of(const ChoiceState& c) const;  // "tool_calls" when calls ended the answer

  const GenerationRequest& request_;
  const tokenizer::Tokenizer& tok_;
  std::string id_;
  int64_t created_;
  int64_t prompt_tokens_ = 0;
  std::vector<ChoiceState> choices_;
};

}  // namespace nanovllm::server
