// Helpers of the grammar tests: compile a grammar against a small vocabulary, match whole texts, and the
// brute-force token mask (every token tried on a copy of the matcher) that the real mask must equal.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nanovllm/grammar/automaton.h"
#include "nanovllm/grammar/compiled_grammar.h"
#include "nanovllm/grammar/grammar.h"
#include "nanovllm/grammar/matcher.h"
#include "nanovllm/grammar/vocabulary.h"

namespace nanovllm::grammar::testing {

// Tokens: the 256 single bytes (ids 0-255), then `extra` (ids 256...), then a stop token.
inline std::shared_ptr<const TokenVocabulary> byte_vocabulary(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  const auto stop = static_cast<int32_t>(tokens.size());
  tokens.emplace_back("<eos>");
  return std::make_shared<const TokenVocabulary>(tokens, std::vector<int32_t>{}, std::vector<int32_t>{stop},
                                                 static_cast<int64_t>(tokens.size()) + 3);
}

inline std::shared_ptr<const CompiledGrammar> compile(const Grammar& g,
                                                      std::shared_ptr<const TokenVocabulary> vocab = byte_vocabulary()) {
  return std::make_shared<const CompiledGrammar>(compile_grammar(g), std::move(vocab));
}

// The whole of `text` is a match of the grammar.
inline bool matches(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_terminate();
}
// `text` can be continued into a match.
inline bool is_prefix(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text);
}

// The mask by trying every token on the matcher (and rolling it back).
inline std::vector<uint32_t> brute_force_mask(GrammarMatcher& m) {
  const TokenVocabulary& vocab = m.grammar().vocab();
  std::vector<uint32_t> words(static_cast<size_t>(bitmask_words(vocab.vocab_size())), 0);
  for (int64_t id = 0; id < vocab.vocab_size(); ++id) {
    if (m.accept_token(static_cast<int32_t>(id))) {
      bitmask_set(words.data(), id);
      m.rollback(1);
    }
  }
  return words;
}

inline std::vector<uint32_t> fast_mask(GrammarMatcher& m) {
  std::vector<uint32_t> words(static_cast<size_t>(bitmask_words(m.grammar().vocab().vocab_size())), 0xFFFFFFFFu);
  m.fill_next_token_bitmask(words.data());
  return words;
}

}  // namespace nanovllm::grammar::testing
