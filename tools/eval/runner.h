// Running samples through the engine: greedy, each with its task's max_new_tokens, scored with its
// task's metric. Every sample is queued at once and the scheduler batches them (offloaded ones run one at
// a time, as the engine does).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/sample.h"
#include "nanovllm/llm/llm_engine.h"

namespace nanovllm::eval {

struct SampleResult {
  std::vector<int32_t> output_ids;
  std::string prediction;  // output_ids decoded, special tokens skipped
  double score = 0;        // the metric, in [0, 1]
  std::string finish_reason;
  std::vector<TokenLogprob> first_token_logprobs;  // the first generated token's top-K list, when asked for
};

// `progress(done)` is called on this thread whenever requests finish. Validates every prompt before
// queueing any (a prompt too long for the engine throws nanovllm::Error and runs nothing). `logprobs` K > 0
// keeps each sample's first-token top-K list (SampleResult::first_token_logprobs).
std::vector<SampleResult> run_samples(LLMEngine& engine, const std::vector<Sample>& samples,
                                      const std::function<void(size_t done)>& progress = {}, int64_t logprobs = 0);

// One object per sample: task, context, index, depth, prompt_tokens, answers, prediction, output_ids,
// score, finish_reason (what --json-out and scripts/hf_eval_ruler.py write, so runs can be compared).
nlohmann::ordered_json results_json(const std::vector<Sample>& samples, const std::vector<SampleResult>& results);

}  // namespace nanovllm::eval
