// RequestOutput and StreamOutput as read-only Python objects. RequestOutput also reads like nano-vLLM's
// output dicts (out["text"], out["token_ids"]) and like vLLM's (out.outputs[0].text).
#include "outputs.h"

#include <pybind11/stl.h>

#include <array>
#include <string_view>

#include "bindings.h"
#include "nanovllm/llm/llm_engine.h"

namespace py = pybind11;

namespace nanovllm::python {

py::object logprobs_to_python(const std::vector<std::vector<TokenLogprob>>& logprobs) {
  if (logprobs.empty()) return py::none();
  py::list steps;
  for (const std::vector<TokenLogprob>& step : logprobs) {
    py::dict d;
    for (const TokenLogprob& t : step) d[py::int_(t.id)] = py::float_(t.logprob);
    steps.append(d);
  }
  return steps;
}

py::object finish_reason_to_python(FinishReason r) {
  if (r == FinishReason::kNone) return py::none();
  return py::str(to_string(r));
}

namespace {

constexpr std::array<const char*, 11> kOutputKeys = {
    "request_id", "prompt_token_ids", "token_ids", "text", "finish_reason", "logprobs", "finished",
    "num_cached_tokens", "num_preemptions", "time_to_first_token_s", "latency_s"};

py::object output_item(const py::object& self, const std::string& key) {
  for (const char* k : kOutputKeys)
    if (key == k) return self.attr(k);
  throw py::key_error(key);
}

}  // namespace

void bind_outputs(py::module_& m) {
  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("token_ids", &RequestOutput::token_ids)
      .def_readonly("text", &RequestOutput::text)
      .def_property_readonly("finish_reason", [](const RequestOutput& o) { return finish_reason_to_python(o.finish_reason); })
      .def_property_readonly("logprobs", [](const RequestOutput& o) { return logprobs_to_python(o.logprobs); })
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_readonly("num_preemptions", &RequestOutput::num_preemptions)
      .def_readonly("time_to_first_token_s", &RequestOutput::time_to_first_token_s)
      .def_readonly("latency_s", &RequestOutput::latency_s)
      // vLLM's shape: one completion per request (n = 1), with the same fields.
      .def_property_readonly("outputs", [](py::object self) { return py::make_tuple(self); })
      .def("__getitem__", &output_item)
      .def("keys", [](const RequestOutput&) { return std::vector<std::string>(kOutputKeys.begin(), kOutputKeys.end()); })
      .def("__repr__", [](const RequestOutput& o) {
        return "RequestOutput(request_id=" + std::to_string(o.request_id) + ", text=" +
               py::repr(py::str(o.text)).cast<std::string>() + ", token_ids=" +
               py::repr(py::cast(o.token_ids)).cast<std::string>() + ", finish_reason=" +
               py::repr(finish_reason_to_python(o.finish_reason)).cast<std::string>() + ")";
      });

  py::class_<StreamOutput>(m, "StreamOutput")
      .def_readonly("index", &StreamOutput::index)
      .def_readonly("request_id", &StreamOutput::request_id)
      .def_readonly("text", &StreamOutput::text)
      .def_readonly("token_ids", &StreamOutput::token_ids)
      .def_property_readonly("logprobs", [](const StreamOutput& o) { return logprobs_to_python(o.logprobs); })
      .def_readonly("finished", &StreamOutput::finished)
      .def_property_readonly("finish_reason", [](const StreamOutput& o) { return finish_reason_to_python(o.finish_reason); })
      .def("__repr__", [](const StreamOutput& o) {
        return "StreamOutput(index=" + std::to_string(o.index) + ", text=" + py::repr(py::str(o.text)).cast<std::string>() +
               ", token_ids=" + py::repr(py::cast(o.token_ids)).cast<std::string>() +
               ", finished=" + (o.finished ? "True" : "False") + ")";
      });
}

}  // namespace nanovllm::python
