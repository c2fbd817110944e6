// Python views of the engine's outputs: whole requests (RequestOutput) and streamed deltas (StreamOutput).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "nanovllm/engine/sequence.h"

namespace nanovllm::python {

// One streamed step of one request: the tokens it appended, their text, and whether it ended.
struct StreamOutput {
  size_t index = 0;  // the prompt's position in the call
  int64_t request_id = 0;
  std::string text;  // the new complete UTF-8 characters (a character split across tokens waits)
  std::vector<int32_t> token_ids;
  std::vector<std::vector<TokenLogprob>> logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
};

// [{token id: logprob} per generated token], or None when none were asked for.
pybind11::object logprobs_to_python(const std::vector<std::vector<TokenLogprob>>& logprobs);
// "stop", "length", "abort", or None while unfinished.
pybind11::object finish_reason_to_python(FinishReason r);

}  // namespace nanovllm::python
