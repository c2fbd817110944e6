// nanovllm detokenize: token id lists in, a JSON list of strings out (one line on stdout).
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_options.h"
#include "nanovllm/core/error.h"
#include "text_util.h"

namespace nanovllm::cli {

void register_detokenize(CLI::App& app) {
  struct Options {
    std::string model, input_json;
    std::vector<std::string> ids;
    bool skip_special = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("detokenize", "decode token ids with a model's tokenizer.json; prints a "
                                     "JSON list of strings");
  cmd->add_option("--model", opt->model, "model directory with tokenizer.json")->required();
  cmd->add_option("--ids", opt->ids, "comma-separated token ids (repeatable)");
  cmd->add_option("--input-json", opt->input_json, "file holding a JSON list of token id lists");
  cmd->add_flag("--skip-special-tokens", opt->skip_special, "drop special tokens (<|im_end|>, ...) from the text");
  cmd->callback([opt] {
    NANOVLLM_CHECK(!opt->input_json.empty() || !opt->ids.empty(), "detokenize: give --ids or --input-json FILE");
    // Ids must be checked against the tokenizer: decode() skips unknown ids (models pad their vocab), which
    // would hide a user's mistake here.
    std::vector<std::vector<int64_t>> lists;
    if (!opt->input_json.empty()) {
      const nlohmann::json j = read_json_file(opt->input_json, "--input-json");
      NANOVLLM_CHECK(j.is_array(), "--input-json: ", opt->input_json, " must hold a JSON list of token id lists");
      for (size_t i = 0; i < j.size(); ++i) {
        NANOVLLM_CHECK(j[i].is_array(), "--input-json: ", opt->input_json, ": element ", i, " is not a list");
        std::vector<int64_t> ids;
        for (const auto& v : j[i]) {
          NANOVLLM_CHECK(v.is_number_integer(), "--input-json: ", opt->input_json, ": element ", i,
                         " holds a non-integer: ", v.dump());
          ids.push_back(v.get<int64_t>());
        }
        lists.push_back(std::move(ids));
      }
    }
    for (const std::string& s : opt->ids) {
      std::vector<int64_t> ids;
      for (int32_t id : parse_token_ids(s, "--ids")) ids.push_back(id);
      lists.push_back(std::move(ids));
    }
    const Tokenizer tok = load_model_tokenizer(opt->model);
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < lists.size(); ++i) {
      std::vector<int32_t> ids;
      for (int64_t id : lists[i]) {
        NANOVLLM_CHECK(id >= 0 && id < tok.vocab_size(), "detokenize: list ", i, ": token id ", id,
                       " is outside the tokenizer's vocabulary [0, ", tok.vocab_size(), ")");
        ids.push_back(static_cast<int32_t>(id));
      }
      out.push_back(tok.decode(ids, opt->skip_special));
    }
    std::cout << out.dump() << "\n";
  });
}

}  // namespace nanovllm::cli
