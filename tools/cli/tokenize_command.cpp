// nanovllm tokenize: JSON list of strings in, JSON list of token id lists out (one line on stdout).
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "nanovllm/core/error.h"
#include "text_util.h"

namespace nanovllm::cli {

void register_tokenize(CLI::App& app) {
  struct Options {
    std::string model, input_json;
    std::vector<std::string> texts;
    bool no_special = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("tokenize", "encode text with a model's tokenizer.json; prints a JSON list "
                                     "of token id lists");
  cmd->add_option("--model", opt->model, "model directory with tokenizer.json")->required();
  cmd->add_option("--input-json", opt->input_json, "file holding a JSON list of strings");
  cmd->add_option("--text", opt->texts, "a string to encode (repeatable; after --input-json's)");
  cmd->add_flag("--no-special", opt->no_special, "do not add the post-processor's special tokens (BOS/EOS)");
  cmd->callback([opt] {
    NANOVLLM_CHECK(!opt->input_json.empty() || !opt->texts.empty(), "tokenize: give --input-json FILE or --text");
    std::vector<std::string> texts;
    if (!opt->input_json.empty()) {
      const nlohmann::json j = read_json_file(opt->input_json, "--input-json");
      NANOVLLM_CHECK(j.is_array(), "--input-json: ", opt->input_json, " must hold a JSON list of strings");
      for (size_t i = 0; i < j.size(); ++i) {
        NANOVLLM_CHECK(j[i].is_string(), "--input-json: ", opt->input_json, ": element ", i, " is not a string");
        texts.push_back(j[i].get<std::string>());
      }
    }
    texts.insert(texts.end(), opt->texts.begin(), opt->texts.end());
    const Tokenizer tok = load_model_tokenizer(opt->model);
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      try {
        out.push_back(tok.encode(texts[i], !opt->no_special));
      } catch (const Error& e) {
        throw e.prefixed(detail::concat("input ", i, ": "));
      }
    }
    std::cout << out.dump() << "\n";
  });
}

}  // namespace nanovllm::cli
