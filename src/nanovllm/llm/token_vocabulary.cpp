#include "nanovllm/llm/token_vocabulary.h"

#include <algorithm>
#include <string>

namespace nanovllm {

std::shared_ptr<const grammar::TokenVocabulary> make_token_vocabulary(const Tokenizer& tokenizer,
                                                                      const std::vector<int64_t>& stop_ids,
                                                                      int64_t model_vocab_size) {
  const int64_t n = std::min(tokenizer.vocab_size(), model_vocab_size);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<int32_t> excluded;
  for (int64_t id = 0; id < n; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (tokenizer.is_special(i)) {
      excluded.push_back(i);  // never text: <|im_end|>, <|endoftext|>, ...
    } else {
      bytes[static_cast<size_t>(id)] = std::string(tokenizer.token_bytes(i));
    }
  }
  std::vector<int32_t> stops;
  for (int64_t id : stop_ids)
    if (id >= 0 && id < model_vocab_size) stops.push_back(static_cast<int32_t>(id));
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), excluded, std::move(stops), model_vocab_size);
}

}  // namespace nanovllm
