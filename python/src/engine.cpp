#include "engine.h"

#include <pybind11/stl.h>

#include <limits>

#include "bindings.h"
#include "engine_config.h"
#include "nanovllm/engine/engine_options.h"
#include "stream.h"
#include "tokenizer.h"

namespace py = pybind11;

namespace nanovllm::python {
namespace {

// Holds the engine for one generate call (released on every exit path).
class EngineLease {
 public:
  explicit EngineLease(Engine& e) : engine_(e) { engine_.acquire(); }
  ~EngineLease() { engine_.release(); }
  EngineLease(const EngineLease&) = delete;
  EngineLease& operator=(const EngineLease&) = delete;

 private:
  Engine& engine_;
};

std::vector<int32_t> token_ids_of(py::handle prompt, size_t index) {
  std::vector<int64_t> ids;
  try {
    ids = prompt.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error("prompt " + std::to_string(index) + ": expected a str or a list of token ids (int), got " +
                         py::repr(prompt).cast<std::string>().substr(0, 80));
  }
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    NANOVLLM_CHECK(id >= 0 && id <= std::numeric_limits<int32_t>::max(), "prompt ", index, ": token id ", id,
                   " is outside the vocabulary");
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

}  // namespace

Engine::Engine(const std::string& model, const py::kwargs& kwargs) {
  EngineConfig config = engine_config_from_kwargs(model, kwargs);
  py::gil_scoped_release release;  // loading the weights, building the runner
  llm_ = std::make_unique<LLM>(std::move(config));
}

void Engine::acquire() {
  if (busy_)
    throw std::runtime_error(
        "this LLM is already running (generate in another thread, or an unfinished stream: close it or "
        "read it to the end)");
  busy_ = true;
}

void Engine::check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

std::vector<std::vector<int32_t>> Engine::prompt_token_ids(const py::list& prompts) const {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    py::handle p = prompts[i];
    if (py::isinstance<py::str>(p)) {
      try {
        ids.push_back(llm_->encode(p.cast<std::string>()));
      } catch (const Error& e) {
        throw e.prefixed(detail::concat("prompt ", i, ": "));
      }
    } else {
      ids.push_back(token_ids_of(p, i));
    }
  }
  return ids;
}

std::vector<RequestOutput> Engine::generate(const py::list& prompts, const std::vector<SamplingParams>& params,
                                            const py::object& on_finished) {
  EngineLease lease(*this);
  const std::vector<std::vector<int32_t>> ids = prompt_token_ids(prompts);
  std::vector<RequestOutput> outputs;
  {
    py::gil_scoped_release release;
    outputs = llm_->generate(ids, params, [&](const std::vector<RequestOutput>& finished) {
      check_signals();
      if (!finished.empty() && !on_finished.is_none()) {
        py::gil_scoped_acquire gil;
        on_finished(finished.size());
      }
    });
    if (llm_->engine().has_tokenizer())
      for (RequestOutput& o : outputs) o.text = llm_->decode(o.token_ids);
  }
  return outputs;
}

void bind_engine(py::module_& m) {
  py::class_<Engine>(m, "Engine")
      .def(py::init<const std::string&, const py::kwargs&>(), py::arg("model"))
      .def("generate", &Engine::generate, py::arg("prompts"), py::arg("sampling_params"),
           py::arg("on_finished") = py::none())
      .def("stream", [](Engine& e, const py::list& prompts, const std::vector<SamplingParams>& params) {
             return std::make_unique<Stream>(e, e.prompt_token_ids(prompts), params);
           }, py::arg("prompts"), py::arg("sampling_params"), py::keep_alive<0, 1>())
      .def("get_tokenizer", [](Engine& e) {
             LLMEngine& engine = e.llm().engine();
             return TokenizerHandle(engine.tokenizer(), [&engine] { return engine.chat_template(); });
           }, py::keep_alive<0, 1>())
      .def_property_readonly("max_model_len", [](Engine& e) { return e.llm().engine().config().model.max_model_len; })
      .def_property_readonly("vocab_size", [](Engine& e) { return e.llm().engine().model_config().vocab_size; })
      .def_property_readonly("backend", [](Engine& e) { return std::string(to_string(e.llm().engine().config().model.backend)); })
      .def_property_readonly("num_generated_tokens", [](Engine& e) { return e.llm().engine().num_generated_tokens(); })
      .def_static("option_names", &engine_option_names)
      .def_static("option_defaults", [] {  // canonical name -> default (None where the default is computed)
        py::dict d;
        for (const EngineOption& o : engine_options()) {
          const OptionValue v = o.default_value();
          d[py::str(o.name)] = o.default_text.empty() ? std::visit([](const auto& x) { return py::cast(x); }, v)
                                                      : py::none();
        }
        return d;
      });
}

}  // namespace nanovllm::python
