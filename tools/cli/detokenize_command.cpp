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
    // would hide a user's mistake here. An id is reported as written (2^64 - 1 is not -1).
    std::vector<std::vector<nlohmann::json>> lists;
    if (!opt->input_json.empty()) {
      const nlohmann::json j = read_json_file(opt->input_json, "--input-json");
      NANOVLLM_CHECK(j.is_array(), "--input-json: ", opt->input_json, " must hold a JSON list of token id lists");
      for (size_t i = 0; i < j.size(); ++i) {
        NANOVLLM_CHECK(j[i].is_array(), "--input-json: ", opt->input_json, ": element ", i, " is not a list");
        std::vector<nlohmann::json> ids;
        for (const auto& v : j[i]) {
          NANOVLLM_CHECK(v.is_number_integer(), "--input-json: ", opt->input_json, ": element ", i,
                         " holds a non-integer: ", v.dump());
          ids.push_back(v);
        }
        lists.push_back(std::move(ids));
      }
    }
    for (const std::string& s : opt->ids) {
      std::vector<nlohmann::json> ids;
      for (int32_t id : parse_token_ids(s, "--ids")) ids.emplace_back(id);
      lists.push_back(std::move(ids));
    }
    const Tokenizer tok = load_model_tokenizer(opt->model);
    const auto vocab = static_cast<int64_t>(tok.vocab_size());
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < lists.size(); ++i) {
      std::vector<int32_t> ids;
      for (const nlohmann::json& id : lists[i]) {
        const bool inside = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                    : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab;
        NANOVLLM_CHECK(inside, "detokenize: list ", i, ": token id ", id.dump(),
                       " is outside the tokenizer's vocabulary [0, ", vocab, ")");
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
      out.push_back(tok.decode(ids, opt->skip_special));
    }
    std::cout << out.dump() << "\n";
  });
}

}  // namespace nanovllm::cli
