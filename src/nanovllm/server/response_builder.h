// ResponseBuilder: turns a request's ChoiceEvents into OpenAI JSON — stream chunks (chat: a role chunk per
// choice first, content deltas, a finish chunk per choice, a usage chunk when asked) or, for a
// non-streamed request, the final response with every choice's text, logprobs and usage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
    std::string text;
    int64_t num_tokens = 0;
    FinishReason finish_reason = FinishReason::kNone;
    nlohmann::json logprobs;  // chat: list of entries; completions: {tokens, token_logprobs, ...}
  };
  nlohmann::json chunk_base() const;
  // Updates the choice's state with `e`; returns this event's logprobs JSON (null when not asked for).
  nlohmann::json absorb(const ChoiceEvent& e);

  const GenerationRequest& request_;
  const tokenizer::Tokenizer& tok_;
  std::string id_;
  int64_t created_;
  int64_t prompt_tokens_ = 0;
  std::vector<ChoiceState> choices_;
};

}  // namespace nanovllm::server
