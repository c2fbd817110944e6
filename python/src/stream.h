// Stream: requests whose tokens come back step by step (LLM.stream). Iterating runs engine steps (GIL
// released) until some request has news; close() aborts what is still running and frees the engine.
#pragma once

#include <pybind11/pybind11.h>

#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "engine.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "outputs.h"

namespace nanovllm::python {

class Stream {
 public:
  // Validates every prompt before queueing any (an error queues nothing) and holds the engine until closed.
  Stream(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The next delta; std::nullopt once every request has finished (the stream is then closed).
  std::optional<StreamOutput> next();
  void close();

 private:
  struct Request {
    size_t index = 0;
    std::optional<IncrementalDetokenizer> detokenizer;
    bool finished = false;
  };
  void on_delta(const RequestDelta& d);

  Engine& engine_;
  std::map<int64_t, Request> requests_;
  std::deque<StreamOutput> ready_;
  bool closed_ = false;
};

}  // namespace nanovllm::python
