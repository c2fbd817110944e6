// LLM(model, **engine_options) -> EngineConfig: every row of the engine's option table (engine/engine_options.h)
// as a keyword (vLLM's names where vLLM has the setting, nano-vLLM's aliases accepted).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "nanovllm/engine/config.h"

namespace nanovllm::python {

// Unknown keywords and values of the wrong type raise TypeError; out-of-range values raise nanovllm.Error
// (a ValueError) naming the option; None means the option's default.
EngineConfig engine_config_from_kwargs(const std::string& model, const pybind11::kwargs& kwargs);

// The keywords engine_config_from_kwargs accepts, sorted.
std::vector<std::string> engine_option_names();

}  // namespace nanovllm::python
