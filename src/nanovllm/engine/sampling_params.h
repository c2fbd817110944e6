// SamplingParams: how one request's tokens are chosen and when it stops (vLLM semantics).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nanovllm {

constexpr float kMaxLogitBias = 100.0f;     // |bias| limit (OpenAI's)
constexpr size_t kMaxLogitBiasEntries = 300;  // tokens one request may bias

// Structured outputs (vLLM's StructuredOutputsParams): the generated text must match exactly one of these.
// The engine compiles it with the grammar engine (grammar/) when the request is added; an unsupported
// schema keyword or regex construct is an Error naming it.
struct StructuredOutputsParams {
  std::optional<std::string> json;                 // a JSON Schema (JSON text)
  std::optional<std::string> regex;                // the whole output matches it
  std::optional<std::vector<std::string>> choice;  // the output is one of these strings
  std::optional<std::string> grammar;              // EBNF (grammar/ebnf.h)
  bool json_object = false;                        // any JSON object
  // Reasoning before the answer (the server's --reasoning-parser): with reasoning_end set (a token of the
  // vocabulary, e.g. "</think>") the constraint starts once the model has written it. reasoning_open: the
  // prompt already opened the reasoning; otherwise the model may open it with reasoning_start as its first
  // token, and an answer that starts any other way is constrained from its first token.
  std::string reasoning_start, reasoning_end;
  bool reasoning_open = false;

  int num_kinds() const {
    return static_cast<int>(json.has_value()) + static_cast<int>(regex.has_value()) +
           static_cast<int>(choice.has_value()) + static_cast<int>(grammar.has_value()) + static_cast<int>(json_object);
  }
};

struct SamplingParams {
  float temperature = 1.0f;          // 0 = greedy
  int64_t top_k = -1;                // -1 or 0 = off
  float top_p = 1.0f;                // (0, 1]
  float min_p = 0.0f;                // [0, 1]
  float repetition_penalty = 1.0f;   // > 0; HF/vLLM form: logits of seen tokens (prompt + output) / or *
  float presence_penalty = 0.0f;     // [-2, 2], on output tokens (OpenAI form)
  float frequency_penalty = 0.0f;    // [-2, 2], on output tokens (OpenAI form)
  std::optional<uint64_t> seed;      // per-request RNG; unset = engine RNG
  int64_t max_tokens = 16;           // >= 1
  int64_t min_tokens = 0;            // EOS / stop ids suppressed until this many were generated
  bool ignore_eos = false;
  std::vector<int64_t> stop_token_ids;
  int64_t logprobs = 0;              // return the top-K logprobs of each step (0 = none)
  // OpenAI logit_bias: token id -> bias in [-100, 100], added to that token's logit before penalties and
  // temperature (vLLM's order); -100 all but bans a token, +100 all but forces it.
  std::map<int32_t, float> logit_bias;
  std::optional<StructuredOutputsParams> structured_outputs;

  // Throws nanovllm::Error naming the offending field.
  void validate(int64_t vocab_size) const;

  // The length a sequence of `prompt_len` tokens reaches: prompt_len + max_tokens, at most max_len, computed
  // without overflow (max_tokens may be anything up to 2^63 - 1).
  int64_t reach(int64_t prompt_len, int64_t max_len) const {
    return max_tokens >= max_len - prompt_len ? max_len : prompt_len + max_tokens;
  }
};

}  // namespace nanovllm
