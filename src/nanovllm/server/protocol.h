// The OpenAI protocol: request bodies of /v1/completions and /v1/chat/completions -> GenerationRequest
// (token-id prompts + SamplingParams + output options), and the JSON of responses and stream chunks.
// Parsing runs on the HTTP threads; every user mistake throws ApiException (400/404) naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/engine/sequence.h"
#include "nanovllm/server/api_error.h"
#include "nanovllm/server/chat_output.h"

namespace nanovllm {
class LLMEngine;
namespace tokenizer {
class Tokenizer;
}
}  // namespace nanovllm

namespace nanovllm::server {

enum class Endpoint { kCompletions, kChat };

struct ProtocolLimits {
  int64_t max_n = 16;             // choices per prompt
  int64_t max_prompts = 64;       // prompts in one /v1/completions request
  int64_t max_stop_strings = 16;
  int64_t max_stop_length = 256;  // bytes
  // What one request may ask of the engine, over all its sequences (prompts x n): 400 beyond, naming the
  // limit. Prompt tokens: each prompt's length times n, summed. Output tokens: max_tokens times the
  // sequences, times 1 + top_logprobs when logprobs are asked for (each listed token costs the response as
  // much as a generated one); a request that does not give max_tokens gets at most its share.
  int64_t max_request_prompt_tokens = 1 << 20;
  int64_t max_request_output_tokens = 1 << 20;
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                          // the served name it asked for
  std::vector<std::vector<int32_t>> prompts;  // completions: one per prompt; chat: exactly one
  SamplingParams params;                      // params.logprobs: what the engine must return (K)
  int64_t n = 1;                              // choices per prompt; choice index = prompt * n + j
  bool stream = false;
  bool include_usage = false;                 // stream_options.include_usage
  std::vector<std::string> stop;
  // Output logprobs: completions `logprobs: K`; chat `logprobs: true` + `top_logprobs: K`.
  bool want_logprobs = false;
  int64_t top_logprobs = 0;
  // Chat: how the answer's text splits into reasoning, content and tool calls (structured_request.h).
  ChatOutputOptions output;

  int64_t num_choices() const { return static_cast<int64_t>(prompts.size()) * n; }
};

// What parsing needs from the engine, read once at start-up (all immutable / thread-safe).
struct ModelContext {
  const LLMEngine* engine = nullptr;       // tokenizer(), chat_template(), validate_request()
  std::vector<std::string> served_names;   // accepted "model" values; the first is reported
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  ProtocolLimits limits;
  ToolParserKind tool_parser = ToolParserKind::kNone;  // the model's tool-call format (--tool-call-parser)
  bool reasoning_parser = false;                       // --reasoning-parser qwen3
};

// Throws ApiException. `body` is the raw request body.
GenerationRequest parse_generation_request(Endpoint endpoint, const std::string& body, const ModelContext& ctx);

// OpenAI logprob entries for one generated token: `lps` is the engine's top-K list (best first, plus the
// sampled token when it is not among them).
nlohmann::json chat_logprob_entry(const tokenizer::Tokenizer& tok, int32_t token,
                                  const std::vector<TokenLogprob>& lps, int64_t top_logprobs);
// Appends one token to a completions `logprobs` object {tokens, token_logprobs, top_logprobs, text_offset}.
void append_completion_logprob(nlohmann::json& logprobs, const tokenizer::Tokenizer& tok, int32_t token,
                               const std::vector<TokenLogprob>& lps, int64_t top_logprobs, int64_t text_offset);
nlohmann::json empty_completion_logprobs();
// A token's text for logprobs: its bytes when they are valid UTF-8, else "bytes:\xNN..." (as vLLM does).
std::string token_display(const tokenizer::Tokenizer& tok, int32_t token);

const char* finish_reason_string(FinishReason r);  // "stop", "length", "abort"
// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump_json(const nlohmann::json& j);

}  // namespace nanovllm::server
