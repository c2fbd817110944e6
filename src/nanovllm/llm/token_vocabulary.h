// The grammar engine's view of a tokenizer (grammar/vocabulary.h): each id's bytes, special tokens kept out
// of text, the stop ids that end a constrained answer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nanovllm/grammar/vocabulary.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm {

// stop_ids: the model's end-of-sequence ids (ids at or past model_vocab_size are ignored).
// model_vocab_size: the logits' width (config.json vocab_size).
std::shared_ptr<const grammar::TokenVocabulary> make_token_vocabulary(const Tokenizer& tokenizer,
                                                                      const std::vector<int64_t>& stop_ids,
                                                                      int64_t model_vocab_size);

}  // namespace nanovllm
