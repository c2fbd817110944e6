// Tokenizer: encode / decode / apply_chat_template with Hugging Face's argument names and defaults.
#include "tokenizer.h"

#include <pybind11/stl.h>

#include "bindings.h"
#include "json_convert.h"
#include "nanovllm/core/error.h"

namespace py = pybind11;

namespace nanovllm::python {

TokenizerHandle TokenizerHandle::from_model_dir(const std::filesystem::path& dir) {
  return TokenizerHandle(Tokenizer::from_model_dir(dir), [dir] {
    const std::filesystem::path config = dir / "tokenizer_config.json";
    NANOVLLM_CHECK(std::filesystem::is_regular_file(config), dir.string(),
                   ": no tokenizer_config.json in the model directory, so no chat template");
    return chat::ChatTemplate::from_tokenizer_config(config);
  });
}

const chat::ChatTemplate& TokenizerHandle::chat_template() {
  if (!template_) template_.emplace(load_template_());
  return *template_;
}

namespace {

// HF: apply_chat_template(conversation, tools=None, add_generation_prompt=False, tokenize=True, **kwargs),
// the kwargs being template variables (enable_thinking for Qwen3).
py::object apply_chat_template(TokenizerHandle& t, const py::object& conversation, const py::object& tools,
                               bool add_generation_prompt, bool tokenize, const py::kwargs& kwargs) {
  chat::ChatTemplateOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  if (!tools.is_none()) opt.tools = to_json(tools, "tools");
  opt.extra_context = nlohmann::ordered_json::object();
  for (const auto& [k, v] : kwargs) {
    const std::string key = k.cast<std::string>();
    if (key == "enable_thinking" && !v.is_none()) opt.enable_thinking = v.cast<bool>();
    else opt.extra_context[key] = to_json(v, key);
  }
  const nlohmann::ordered_json messages = to_json(conversation, "conversation");
  NANOVLLM_CHECK(messages.is_array(), "conversation must be a list of messages ({'role': ..., 'content': ...})");
  const chat::ChatTemplate& tmpl = t.chat_template();  // loaded with the GIL held: the handle is shared
  std::string text;
  {
    py::gil_scoped_release release;
    text = tmpl.render(messages, opt);
  }
  if (!tokenize) return py::str(text);
  // The template writes the special tokens itself.
  return py::cast(t.tokenizer().encode(text, /*add_special_tokens=*/false));
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<TokenizerHandle>(m, "Tokenizer")
      .def_static("from_pretrained", [](const std::string& dir) { return TokenizerHandle::from_model_dir(dir); },
                  py::arg("pretrained_model_name_or_path"))
      .def("encode", [](const TokenizerHandle& t, const std::string& text, bool add_special_tokens) {
             return t.tokenizer().encode(text, add_special_tokens);
           }, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode", [](const TokenizerHandle& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             return t.tokenizer().decode(ids, skip_special_tokens);
           }, py::arg("token_ids"), py::arg("skip_special_tokens") = false)
      .def("apply_chat_template", &apply_chat_template, py::arg("conversation"), py::arg("tools") = py::none(),
           py::arg("add_generation_prompt") = false, py::arg("tokenize") = true)
      .def_property_readonly("vocab_size", [](const TokenizerHandle& t) { return t.tokenizer().vocab_size(); })
      .def_property_readonly("eos_token_id", [](const TokenizerHandle& t) { return t.tokenizer().eos_token_id(); })
      .def_property_readonly("bos_token_id", [](const TokenizerHandle& t) { return t.tokenizer().bos_token_id(); })
      .def("__call__", [](const TokenizerHandle& t, const std::string& text, bool add_special_tokens) {
             py::dict d;
             d["input_ids"] = t.tokenizer().encode(text, add_special_tokens);
             return d;
           }, py::arg("text"), py::arg("add_special_tokens") = true);
}

}  // namespace nanovllm::python
