#include "json_convert.h"

namespace py = pybind11;

namespace nanovllm::python {

nlohmann::ordered_json to_json(py::handle value, const std::string& what) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (const auto& [k, v] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k)) throw py::type_error(what + ": dict keys must be str, got " + py::repr(k).cast<std::string>());
      const std::string key = k.cast<std::string>();
      obj[key] = to_json(v, what + "['" + key + "']");
    }
    return obj;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    size_t i = 0;
    for (py::handle item : value) arr.push_back(to_json(item, what + "[" + std::to_string(i++) + "]"));
    return arr;
  }
  throw py::type_error(what + ": cannot pass a " + py::type::of(value).attr("__name__").cast<std::string>() +
                       " to the chat template (use str, int, float, bool, None, list, dict)");
}

}  // namespace nanovllm::python
