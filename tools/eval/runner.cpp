#include "eval/runner.h"

#include <unordered_map>

#include "eval/scoring.h"
#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::eval {
namespace {

SamplingParams greedy(int64_t max_tokens, int64_t logprobs) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.logprobs = logprobs;
  return p;
}

}  // namespace

std::vector<SampleResult> run_samples(LLMEngine& engine, const std::vector<Sample>& samples,
                                      const std::function<void(size_t done)>& progress, int64_t logprobs) {
  for (size_t i = 0; i < samples.size(); ++i) {
    try {
      engine.validate_request(samples[i].prompt_ids, greedy(samples[i].max_new_tokens, logprobs));
    } catch (const Error& e) {
      throw e.prefixed(detail::concat("sample ", samples[i].task, " #", samples[i].index, " (context ",
                                      samples[i].context, "): "));
    }
  }
  std::unordered_map<int64_t, size_t> by_request;
  for (size_t i = 0; i < samples.size(); ++i)
    by_request[engine.add_request(samples[i].prompt_ids, greedy(samples[i].max_new_tokens, logprobs))] = i;

  const tokenizer::Tokenizer& tok = engine.tokenizer();
  std::vector<SampleResult> results(samples.size());
  size_t done = 0;
  while (engine.has_unfinished()) {
    const std::vector<RequestOutput> finished = engine.step();
    for (const RequestOutput& o : finished) {
      const auto it = by_request.find(o.request_id);
      NANOVLLM_CHECK(it != by_request.end(), "eval: an unknown request ", o.request_id, " finished");
      const Sample& s = samples[it->second];
      SampleResult& r = results[it->second];
      r.output_ids = o.token_ids;
      r.prediction = tok.decode(o.token_ids, /*skip_special_tokens=*/true);
      r.score = score_prediction(s.metric, r.prediction, s.answers);
      r.finish_reason = to_string(o.finish_reason);
      if (logprobs > 0) {
        NANOVLLM_CHECK(!o.logprobs.empty(), "eval: sample ", s.task, " #", s.index, " came back without logprobs");
        r.first_token_logprobs = o.logprobs.front();
      }
      ++done;
    }
    if (!finished.empty() && progress) progress(done);
  }
  NANOVLLM_CHECK(done == samples.size(), "eval: ", samples.size() - done, " requests never finished");
  return results;
}

nlohmann::ordered_json results_json(const std::vector<Sample>& samples, const std::vector<SampleResult>& results) {
  NANOVLLM_CHECK(samples.size() == results.size(), "results_json: ", samples.size(), " samples, ", results.size(),
                 " results");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    const SampleResult& r = results[i];
    nlohmann::ordered_json j;
    j["task"] = s.task;
    j["context"] = s.context;
    j["index"] = s.index;
    j["depth"] = s.depth;
    j["prompt_tokens"] = s.prompt_ids.size();
    j["answers"] = s.answers;
    j["prediction"] = r.prediction;
    j["output_ids"] = r.output_ids;
    j["score"] = r.score;
    j["finish_reason"] = r.finish_reason;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace nanovllm::eval
