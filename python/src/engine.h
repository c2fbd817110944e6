// Engine: one nanovllm::LLM for Python. The engine runs with the GIL released; between steps the GIL is
// taken briefly to check for Ctrl-C (KeyboardInterrupt aborts the call's requests) and report progress.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "nanovllm/llm/llm.h"

namespace nanovllm::python {

class Engine {
 public:
  Engine(const std::string& model, const pybind11::kwargs& kwargs);

  // prompts: a list whose items are str (encoded with the model's tokenizer) or token-id lists; one params
  // per prompt. on_finished(n) is called (GIL held) when n more requests finished. Outputs in prompt order,
  // with `text` decoded when the model has a tokenizer.
  std::vector<RequestOutput> generate(const pybind11::list& prompts, const std::vector<SamplingParams>& params,
                                      const pybind11::object& on_finished);

  // Prompts as token ids; str items encoded (errors name the prompt's index).
  std::vector<std::vector<int32_t>> prompt_token_ids(const pybind11::list& prompts) const;

  LLM& llm() { return *llm_; }

  // One call at a time: generate and an open stream each hold the engine (Python threads could otherwise
  // enter it together while the GIL is released). acquire() raises RuntimeError when it is held.
  void acquire();
  void release() { busy_ = false; }

  // Takes the GIL, raises KeyboardInterrupt (as a C++ exception) on a pending Ctrl-C.
  static void check_signals();

 private:
  std::unique_ptr<LLM> llm_;
  bool busy_ = false;  // read and written with the GIL held
};

}  // namespace nanovllm::python
