#include "engine_config.h"

#include <pybind11/stl.h>

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/engine/engine_options.h"
#include "nanovllm/kernels/device.h"

namespace py = pybind11;

namespace nanovllm::python {
namespace {

template <class T>
T cast_option(py::handle value, const std::string& name) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error("LLM(): " + name + " has the wrong type (" +
                         py::type::of(value).attr("__name__").cast<std::string>() + ")");
  }
}

// A keyword's value as the option's kind; None: the option's default (backend: the GPU when there is one).
OptionValue option_value(const EngineOption& o, py::handle v, const std::string& keyword) {
  if (v.is_none()) {
    if (o.name == "backend") return std::string(to_string(default_backend()));
    return o.default_value();
  }
  switch (o.kind) {
    case EngineOption::Kind::kInt: return cast_option<int64_t>(v, keyword);
    case EngineOption::Kind::kReal: return cast_option<double>(v, keyword);
    case EngineOption::Kind::kFlag: return cast_option<bool>(v, keyword);
    case EngineOption::Kind::kText: return cast_option<std::string>(v, keyword);
  }
  return {};
}

}  // namespace

EngineConfig engine_config_from_kwargs(const std::string& model, const py::kwargs& kwargs) {
  EngineConfig c;
  c.model.path = model;
  c.model.backend = default_backend();
  for (const auto& [k, v] : kwargs) {
    const std::string name = k.cast<std::string>();
    const EngineOption* o = find_engine_option(name);
    if (o == nullptr) {
      std::string known;
      for (const std::string& n : engine_option_names()) known += (known.empty() ? "" : ", ") + n;
      throw py::type_error("LLM() got an unexpected keyword argument '" + name + "' (engine options: " + known + ")");
    }
    const OptionValue value = option_value(*o, v, name);
    o->check(value);  // nanovllm.Error naming the option
    o->set(c, value);
  }
  return c;
}

std::vector<std::string> engine_option_names() {
  std::vector<std::string> names;
  for (const EngineOption& o : engine_options()) {
    names.push_back(o.name);
    names.insert(names.end(), o.python_aliases.begin(), o.python_aliases.end());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace nanovllm::python
