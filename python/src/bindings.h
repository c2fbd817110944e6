// The pieces of nanovllm._core, one bind_* per file; module.cpp calls them in dependency order.
#pragma once

#include <pybind11/pybind11.h>

namespace nanovllm::python {

void bind_errors(pybind11::module_& m);
void bind_sampling_params(pybind11::module_& m);
void bind_outputs(pybind11::module_& m);
void bind_tokenizer(pybind11::module_& m);
void bind_engine(pybind11::module_& m);
void bind_stream(pybind11::module_& m);

}  // namespace nanovllm::python
