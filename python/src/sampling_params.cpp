// SamplingParams: every field of the engine's struct (engine/sampling_params.h) as a keyword, validated on
// construction (ValueError naming the field); the engine validates again, against the model, per request.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <sstream>

#include "bindings.h"
#include "nanovllm/core/error.h"
#include "nanovllm/engine/sampling_params.h"

namespace py = pybind11;

namespace nanovllm::python {
namespace {

// vLLM's StructuredOutputsParams: json (a schema: dict or JSON text), regex, choice, grammar (EBNF) or
// json_object. vLLM's tuning knobs the engine does not have are refused when set, never ignored.
StructuredOutputsParams make_structured(const py::object& json, std::optional<std::string> regex,
                                        std::optional<std::vector<std::string>> choice, std::optional<std::string> grammar,
                                        bool json_object, const py::object& disable_fallback,
                                        const py::object& disable_any_whitespace,
                                        const py::object& disable_additional_properties,
                                        const py::object& whitespace_pattern, const py::object& structural_tag) {
  StructuredOutputsParams so;
  if (!json.is_none()) {
    so.json = py::isinstance<py::str>(json) ? json.cast<std::string>()
                                            : py::module_::import("json").attr("dumps")(json).cast<std::string>();
  }
  so.regex = std::move(regex);
  so.choice = std::move(choice);
  so.grammar = std::move(grammar);
  so.json_object = json_object;
  const std::pair<const char*, const py::object*> unsupported[] = {
      {"disable_any_whitespace", &disable_any_whitespace}, {"disable_additional_properties", &disable_additional_properties},
      {"whitespace_pattern", &whitespace_pattern}, {"structural_tag", &structural_tag}};
  for (const auto& [name, value] : unsupported)
    NANOVLLM_CHECK(value->is_none() || (py::isinstance<py::bool_>(*value) && !value->cast<bool>()),
                   "StructuredOutputsParams.", name, " is not supported");
  (void)disable_fallback;  // there is no fallback backend: nothing to disable
  NANOVLLM_CHECK(so.num_kinds() == 1, "StructuredOutputsParams: give exactly one of json, regex, choice, grammar, "
                 "json_object (got ", so.num_kinds(), ")");
  return so;
}

std::string repr_structured(const StructuredOutputsParams& so) {
  std::ostringstream os;
  os << "StructuredOutputsParams(";
  if (so.json) os << "json=" << py::repr(py::str(*so.json)).cast<std::string>();
  if (so.regex) os << "regex=" << py::repr(py::str(*so.regex)).cast<std::string>();
  if (so.choice) os << "choice=" << py::repr(py::cast(*so.choice)).cast<std::string>();
  if (so.grammar) os << "grammar=" << py::repr(py::str(*so.grammar)).cast<std::string>();
  if (so.json_object) os << "json_object=True";
  os << ")";
  return os.str();
}

SamplingParams make_params(float temperature, int64_t top_k, float top_p, float min_p, float repetition_penalty,
                           float presence_penalty, float frequency_penalty, std::optional<uint64_t> seed,
                           int64_t max_tokens, int64_t min_tokens, bool ignore_eos,
                           std::optional<std::vector<int64_t>> stop_token_ids, std::optional<int64_t> logprobs,
                           std::optional<std::map<int32_t, float>> logit_bias,
                           std::optional<StructuredOutputsParams> structured_outputs) {
  SamplingParams p;
  p.structured_outputs = std::move(structured_outputs);
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.min_tokens = min_tokens;
  p.ignore_eos = ignore_eos;
  p.stop_token_ids = stop_token_ids.value_or(std::vector<int64_t>{});
  p.logprobs = logprobs.value_or(0);
  p.logit_bias = logit_bias.value_or(std::map<int32_t, float>{});
  // Token ids are checked against the model's vocabulary when a request is added.
  p.validate(std::numeric_limits<int64_t>::max());
  return p;
}

std::string repr(const SamplingParams& p) {
  std::ostringstream os;
  os << "SamplingParams(temperature=" << p.temperature << ", top_k=" << p.top_k << ", top_p=" << p.top_p
     << ", min_p=" << p.min_p << ", repetition_penalty=" << p.repetition_penalty
     << ", presence_penalty=" << p.presence_penalty << ", frequency_penalty=" << p.frequency_penalty << ", seed=";
  if (p.seed) os << *p.seed; else os << "None";
  os << ", max_tokens=" << p.max_tokens << ", min_tokens=" << p.min_tokens
     << ", ignore_eos=" << (p.ignore_eos ? "True" : "False") << ", stop_token_ids=[";
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) os << (i ? ", " : "") << p.stop_token_ids[i];
  os << "], logprobs=" << p.logprobs << ", logit_bias={";
  bool first = true;
  for (const auto& [id, bias] : p.logit_bias) {
    os << (first ? "" : ", ") << id << ": " << bias;
    first = false;
  }
  os << "}";
  if (p.structured_outputs) os << ", structured_outputs=" << repr_structured(*p.structured_outputs);
  os << ")";
  return os.str();
}

}  // namespace

void bind_sampling_params(py::module_& m) {
  py::class_<StructuredOutputsParams>(m, "StructuredOutputsParams")
      .def(py::init(&make_structured), py::kw_only(), py::arg("json") = py::none(), py::arg("regex") = py::none(),
           py::arg("choice") = py::none(), py::arg("grammar") = py::none(), py::arg("json_object") = false,
           py::arg("disable_fallback") = py::none(), py::arg("disable_any_whitespace") = py::none(),
           py::arg("disable_additional_properties") = py::none(), py::arg("whitespace_pattern") = py::none(),
           py::arg("structural_tag") = py::none())
      .def_readonly("json", &StructuredOutputsParams::json)
      .def_readonly("regex", &StructuredOutputsParams::regex)
      .def_readonly("choice", &StructuredOutputsParams::choice)
      .def_readonly("grammar", &StructuredOutputsParams::grammar)
      .def_readonly("json_object", &StructuredOutputsParams::json_object)
      .def("__repr__", &repr_structured);
  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init(&make_params), py::kw_only(), py::arg("temperature") = 1.0f, py::arg("top_k") = -1,
           py::arg("top_p") = 1.0f, py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f,
           py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f, py::arg("seed") = py::none(),
           py::arg("max_tokens") = 16, py::arg("min_tokens") = 0, py::arg("ignore_eos") = false,
           py::arg("stop_token_ids") = py::none(), py::arg("logprobs") = py::none(),
           py::arg("logit_bias") = py::none(), py::arg("structured_outputs") = py::none())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("structured_outputs", &SamplingParams::structured_outputs)
      .def("__repr__", &repr);
}

}  // namespace nanovllm::python
