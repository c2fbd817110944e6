#include "nanovllm/llm/llm.h"

#include <map>

namespace nanovllm {

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<SamplingParams>& params) {
  NANOVLLM_CHECK(prompts.size() == params.size(), "generate: ", prompts.size(), " prompts but ", params.size(),
                 " sampling params");
  // A bad prompt rejects the whole call before anything runs.
  for (size_t i = 0; i < prompts.size(); ++i) engine_.validate_request(prompts[i], params[i]);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(engine_.add_request(prompts[i], params[i]));
  std::map<int64_t, RequestOutput> done;
  while (engine_.has_unfinished())
    for (RequestOutput& o : engine_.step()) done.emplace(o.request_id, std::move(o));
  std::vector<RequestOutput> outputs;
  for (int64_t id : ids) outputs.push_back(std::move(done.at(id)));
  return outputs;
}

}  // namespace nanovllm
