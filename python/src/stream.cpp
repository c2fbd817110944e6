#include "stream.h"

#include <pybind11/stl.h>

#include "bindings.h"

namespace py = pybind11;

namespace nanovllm::python {

Stream::Stream(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params)
    : engine_(engine) {
  NANOVLLM_CHECK(prompts.size() == params.size(), "stream: ", prompts.size(), " prompts but ", params.size(),
                 " sampling params");
  LLMEngine& e = engine_.llm().engine();
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      e.validate_request(prompts[i], params[i]);
    } catch (const Error& err) {
      throw err.prefixed(detail::concat("prompt ", i, ": "));
    }
  }
  engine_.acquire();
  const Tokenizer* tokenizer = e.has_tokenizer() ? &e.tokenizer() : nullptr;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r{i, std::nullopt, false};
    if (tokenizer) r.detokenizer.emplace(*tokenizer, /*skip_special_tokens=*/true);
    requests_.emplace(e.add_request(prompts[i], params[i]), std::move(r));
  }
  e.set_delta_callback([this](const RequestDelta& d) { on_delta(d); });
}

Stream::~Stream() {
  try {
    close();
  } catch (...) {
    // A destructor cannot raise; close() only fails when the engine itself failed.
  }
}

void Stream::on_delta(const RequestDelta& d) {
  const auto it = requests_.find(d.request_id);
  if (it == requests_.end()) return;
  Request& r = it->second;
  StreamOutput out;
  out.index = r.index;
  out.request_id = d.request_id;
  out.token_ids = d.new_token_ids;
  out.logprobs = d.logprobs;
  out.finished = d.finished;
  out.finish_reason = d.finish_reason;
  if (r.detokenizer) {
    out.text = r.detokenizer->add(d.new_token_ids);
    if (d.finished) out.text += r.detokenizer->finish();
  }
  r.finished = d.finished;
  ready_.push_back(std::move(out));
}

std::optional<StreamOutput> Stream::next() {
  if (ready_.empty() && !closed_) {
    LLMEngine& e = engine_.llm().engine();
    py::gil_scoped_release release;
    while (ready_.empty() && e.has_unfinished()) {
      e.step();
      Engine::check_signals();
    }
  }
  if (ready_.empty()) {
    close();
    return std::nullopt;
  }
  StreamOutput out = std::move(ready_.front());
  ready_.pop_front();
  return out;
}

void Stream::close() {
  if (closed_) return;
  closed_ = true;
  LLMEngine& e = engine_.llm().engine();
  {
    py::gil_scoped_release release;
    for (const auto& [id, r] : requests_)
      if (!r.finished) e.abort_request(id);
    while (e.has_unfinished()) e.step();  // the aborted requests' blocks are freed by the next step
    e.set_delta_callback(nullptr);
  }
  engine_.release();
}

void bind_stream(py::module_& m) {
  py::class_<Stream>(m, "Stream")
      .def("__iter__", [](Stream& s) -> Stream& { return s; })
      .def("__next__", [](Stream& s) {
        std::optional<StreamOutput> out = s.next();
        if (!out) throw py::stop_iteration();
        return std::move(*out);
      })
      .def("close", &Stream::close);
}

}  // namespace nanovllm::python
