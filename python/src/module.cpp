// nanovllm._core: the engine's C++ API (src/nanovllm/llm) for Python. The public API is the package
// around it (python/nanovllm/), which only reshapes arguments; everything that runs is here or below.
#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "nano-vLLM C++ engine bindings (use the nanovllm package: LLM, SamplingParams)";
  using namespace nanovllm::python;
  bind_errors(m);
  bind_sampling_params(m);
  bind_outputs(m);
  bind_tokenizer(m);
  bind_engine(m);
  bind_stream(m);
}
