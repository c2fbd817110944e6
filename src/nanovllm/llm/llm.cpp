#include "nanovllm/llm/llm.h"

#include <map>

#include "nanovllm/core/error.h"

namespace nanovllm {

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<SamplingParams>& params, const StepCallback& on_step) {
  NANOVLLM_CHECK(prompts.size() == params.size(), "generate: ", prompts.size(), " prompts but ", params.size(),
                 " sampling params");
  // A bad prompt rejects the whole call before anything runs; the error names it by its index.
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      engine_.validate_request(prompts[i], params[i]);
    } catch (const Error& e) {
      throw e.prefixed(detail::concat("prompt ", i, ": "));
    }
  }
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(engine_.add_request(prompts[i], params[i]));
  std::map<int64_t, RequestOutput> done;
  try {
    while (engine_.has_unfinished()) {
      std::vector<RequestOutput> finished = engine_.step();
      if (on_step) on_step(finished);
      for (RequestOutput& o : finished) done.emplace(o.request_id, std::move(o));
    }
  } catch (...) {
    // Stopped by the callback (or a failed step): free what is still queued or running, so the engine
    // serves the next call as if this one had never been made.
    for (int64_t id : ids)
      if (!done.contains(id)) engine_.abort_request(id);
    while (engine_.has_unfinished()) engine_.step();
    throw;
  }
  std::vector<RequestOutput> outputs;
  for (int64_t id : ids) outputs.push_back(std::move(done.at(id)));
  return outputs;
}

}  // namespace nanovllm
