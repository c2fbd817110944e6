// Python values (dict, list, str, int, float, bool, None) -> JSON, for chat messages and template variables.
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>

namespace nanovllm::python {

// Throws TypeError naming `what` and the path for anything JSON cannot hold.
nlohmann::ordered_json to_json(pybind11::handle value, const std::string& what);

}  // namespace nanovllm::python
