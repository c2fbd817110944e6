// SamplingParams: every field of the engine's struct (engine/sampling_params.h) as a keyword, validated on
// construction (ValueError naming the field); the engine validates again, against the model, per request.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <sstream>

#include "bindings.h"
#include "nanovllm/engine/sampling_params.h"

namespace py = pybind11;

namespace nanovllm::python {
namespace {

SamplingParams make_params(float temperature, int64_t top_k, float top_p, float min_p, float repetition_penalty,
                           float presence_penalty, float frequency_penalty, std::optional<uint64_t> seed,
                           int64_t max_tokens, int64_t min_tokens, bool ignore_eos,
                           std::optional<std::vector<int64_t>> stop_token_ids, std::optional<int64_t> logprobs,
                           std::optional<std::map<int32_t, float>> logit_bias) {
  SamplingParams p;
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
  os << "})";
  return os.str();
}

}  // namespace

void bind_sampling_params(py::module_& m) {
  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init(&make_params), py::kw_only(), py::arg("temperature") = 1.0f, py::arg("top_k") = -1,
           py::arg("top_p") = 1.0f, py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f,
           py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f, py::arg("seed") = py::none(),
           py::arg("max_tokens") = 16, py::arg("min_tokens") = 0, py::arg("ignore_eos") = false,
           py::arg("stop_token_ids") = py::none(), py::arg("logprobs") = py::none(),
           py::arg("logit_bias") = py::none())
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
      .def("__repr__", &repr);
}

}  // namespace nanovllm::python
