// Reads tokenizer.json in one SAX pass: model.vocab and model.merges (150k entries each for Qwen3) go straight
// into flat tables; everything else becomes an ordinary, small json DOM. A DOM of the whole file (std::map
// objects, one allocation per node) took most of the tokenizer's load time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "nanovllm/tokenizer/token_index.h"

namespace nanovllm::tokenizer {

struct TokenizerJson {
  // The file as json::parse gives it, except that a model.vocab object and a model.merges array are left
  // empty: their entries are below.
  nlohmann::json doc;

  // model.vocab: token -> index into vocab_ids, which holds the id as written (not checked yet). A token
  // written twice keeps its last id, as json::parse does.
  TokenIndex vocab;
  std::vector<nlohmann::json> vocab_ids;

  // model.merges entries "a b" and ["a", "b"], in order; each one's two tokens back to back in merge_text.
  struct MergeSpan {
    size_t offset, left_size, right_size;
  };
  std::string merge_text;
  std::vector<MergeSpan> merges;
  // Entries of model.merges of neither form, as written (the loader rejects the file for any of them).
  std::vector<nlohmann::json> bad_merges;
};

// Throws nlohmann::json::exception, as json::parse does, when `text` is not valid JSON.
TokenizerJson read_tokenizer_json(std::string_view text);

}  // namespace nanovllm::tokenizer
