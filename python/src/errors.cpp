// nanovllm::Error -> nanovllm.Error, a ValueError: the engine throws it for what a caller can get wrong
// (bad arguments, prompts, model directories), with the message the CLI shows (no source location).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "nanovllm/core/error.h"

namespace py = pybind11;

namespace nanovllm::python {

void bind_errors(py::module_& m) {
  static py::handle error_type = py::exception<nanovllm::Error>(m, "Error", PyExc_ValueError).release();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nanovllm::Error& e) {
      PyErr_SetString(error_type.ptr(), e.message().c_str());
    }
  });
}

}  // namespace nanovllm::python
