// LLM: the offline API (vLLM / nano-vLLM style).
//   nanovllm::LLM llm({.model = "Qwen3-0.6B"});
//   auto outs = llm.generate({{9707, 11, 1879}}, {.temperature = 0, .max_tokens = 32});
#pragma once

#include <functional>
#include <vector>

#include "nanovllm/engine/llm_engine.h"

namespace nanovllm {

class LLM {
 public:
  explicit LLM(EngineConfig config) : engine_(std::move(config)) {}

  // Runs every prompt to completion; outputs in prompt order. All prompts are validated before any
  // runs: a bad one throws nanovllm::Error and nothing is lost.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params);
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<SamplingParams>& params);

  LLMEngine& engine() { return engine_; }

 private:
  LLMEngine engine_;
};

}  // namespace nanovllm
