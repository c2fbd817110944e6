#include "nanovllm/engine/sampling_params.h"

#include <cmath>

#include "nanovllm/core/error.h"

namespace nanovllm {

namespace {
constexpr int64_t kMaxLogprobs = 20;  // vLLM's default max_logprobs
}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
  NANOVLLM_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
                 "SamplingParams.temperature must be >= 0, got ", temperature);
  NANOVLLM_CHECK(top_p > 0.0f && top_p <= 1.0f, "SamplingParams.top_p must be in (0, 1], got ", top_p);
  NANOVLLM_CHECK(top_k == -1 || top_k >= 0,
                 "SamplingParams.top_k must be -1 or 0 (off) or >= 1, got ", top_k);
  NANOVLLM_CHECK(min_p >= 0.0f && min_p <= 1.0f, "SamplingParams.min_p must be in [0, 1], got ", min_p);
  NANOVLLM_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
                 "SamplingParams.repetition_penalty must be > 0, got ", repetition_penalty);
  NANOVLLM_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
                 "SamplingParams.presence_penalty must be in [-2, 2], got ", presence_penalty);
  NANOVLLM_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
                 "SamplingParams.frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  NANOVLLM_CHECK(max_tokens >= 1, "SamplingParams.max_tokens must be >= 1, got ", max_tokens);
  NANOVLLM_CHECK(min_tokens >= 0 && min_tokens <= max_tokens,
                 "SamplingParams.min_tokens must be in [0, max_tokens=", max_tokens, "], got ", min_tokens);
  for (int64_t id : stop_token_ids) {
    NANOVLLM_CHECK(id >= 0 && id < vocab_size, "SamplingParams.stop_token_ids: id ", id,
                   " is outside the vocabulary [0, ", vocab_size, ")");
  }
  NANOVLLM_CHECK(logprobs >= 0 && logprobs <= kMaxLogprobs, "SamplingParams.logprobs must be in [0, ",
                 kMaxLogprobs, "], got ", logprobs);
  NANOVLLM_CHECK(logit_bias.size() <= kMaxLogitBiasEntries, "SamplingParams.logit_bias has ", logit_bias.size(),
                 " entries; at most ", kMaxLogitBiasEntries, " are allowed");
  if (structured_outputs) {
    const StructuredOutputsParams& so = *structured_outputs;
    NANOVLLM_CHECK(so.num_kinds() == 1, "SamplingParams.structured_outputs: give exactly one of json, regex, choice, "
                   "grammar, json_object (got ", so.num_kinds(), ")");
    NANOVLLM_CHECK(!so.reasoning_open || !so.reasoning_end.empty(),
                   "SamplingParams.structured_outputs: reasoning_open needs reasoning_end");
  }
  for (const auto& [id, bias] : logit_bias) {
    NANOVLLM_CHECK(id >= 0 && id < vocab_size, "SamplingParams.logit_bias: id ", id,
                   " is outside the vocabulary [0, ", vocab_size, ")");
    NANOVLLM_CHECK(std::isfinite(bias) && bias >= -kMaxLogitBias && bias <= kMaxLogitBias,
                   "SamplingParams.logit_bias: the bias of id ", id, " must be in [-100, 100], got ", bias);
  }
}

}  // namespace nanovllm
