// LLM: the offline API (vLLM / nano-vLLM style).
//   nanovllm::LLM llm({.model = {.path = "Qwen3-0.6B"}});
//   auto outs = llm.generate({{9707, 11, 1879}}, {.temperature = 0, .max_tokens = 32});   // token ids
//   auto outs = llm.generate({"The capital of France is"}, params);                       // text; out.text
#pragma once

#include <concepts>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nanovllm/llm/llm_engine.h"

namespace nanovllm {

class LLM {
 public:
  // Called by generate after every engine step with the requests that finished in it (for progress bars,
  // and to check for Ctrl-C in the Python binding). It may throw to stop the call: the requests still
  // running are aborted (their KV blocks freed, the engine ready for the next call) and the exception
  // propagates.
  using StepCallback = std::function<void(const std::vector<RequestOutput>& finished)>;

  explicit LLM(EngineConfig config) : engine_(std::move(config)) {}

  // Runs every prompt to completion; outputs in prompt order. All prompts are validated before any
  // runs: a bad one throws nanovllm::Error and nothing is lost.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<SamplingParams>& params, const StepCallback& on_step = {});

  // Text prompts: encoded with the model directory's tokenizer (add_special_tokens, as vLLM does), and each
  // output's `text` is its generated tokens decoded with skip_special_tokens. Throws nanovllm::Error when the
  // directory has no tokenizer.json or a prompt is not valid UTF-8 (naming the prompt's index).
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts, const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts,
                                      const std::vector<SamplingParams>& params, const StepCallback& on_step = {});

  // Braced-list forms. Without them generate({{1, 2, 3}}, p) is ambiguous (a std::string can be built from
  // {1, 2, 3}) and so is generate({"a", "b"}, p) (vector<vector<int32_t>> has an iterator-pair constructor);
  // an initializer_list parameter wins overload resolution over both vectors.
  std::vector<RequestOutput> generate(std::initializer_list<std::vector<int32_t>> prompts,
                                      const SamplingParams& params) {
    return generate(std::vector<std::vector<int32_t>>(prompts), params);
  }
  template <class S>
    requires std::convertible_to<const S&, std::string_view>
  std::vector<RequestOutput> generate(std::initializer_list<S> prompts, const SamplingParams& params) {
    std::vector<std::string> text;
    for (const S& s : prompts) text.emplace_back(std::string_view(s));
    return generate(text, params);
  }

  // The model directory's tokenizer (throws when it has none).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(std::span<const int32_t> token_ids, bool skip_special_tokens = true) const;

  LLMEngine& engine() { return engine_; }

 private:
  LLMEngine engine_;
};

}  // namespace nanovllm
