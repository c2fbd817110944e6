// GrammarMatcher: one generation's progress through a CompiledGrammar, token by token.
//
//   GrammarMatcher m(compiled);
//   m.fill_next_token_bitmask(words);   // which token ids may come next
//   ... sample a token allowed by the mask ...
//   m.accept_token(id);                 // advance; false (and no change) for a token the grammar refuses
//   m.is_completed();                   // the match is whole and nothing may follow: stop generating
//
// Stop tokens (TokenVocabulary::stop_ids) are allowed exactly when the text so far is a whole match
// (can_terminate()); accepting one terminates the matcher. rollback(n) undoes the last n accepted tokens
// (speculative decoding, jump-forward). One matcher is used by one thread at a time; matchers of one
// CompiledGrammar may run on different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "nanovllm/grammar/compiled_grammar.h"
#include "nanovllm/grammar/pda.h"

namespace nanovllm::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  bool accept_token(int32_t id);
  // All of `bytes` or nothing (a test and tool helper; tokens go through accept_token).
  bool accept_bytes(std::string_view bytes);
  void rollback(size_t num_tokens);
  size_t num_tokens() const { return token_steps_.size(); }

  // words: [bitmask_words(vocab().vocab_size())] u32, overwritten.
  void fill_next_token_bitmask(uint32_t* words);

  bool can_terminate() const { return !terminated_ && rt_.can_end(); }
  bool is_completed() const { return terminated_ || (rt_.can_end() && rt_.tops().empty()); }
  bool is_terminated() const { return terminated_; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  PdaRuntime rt_;
  std::vector<size_t> token_steps_;  // rt_.num_steps() before each accepted token
  bool terminated_ = false;
  std::vector<int32_t> states_, uncertain_;  // fill_next_token_bitmask's scratch
};

}  // namespace nanovllm::grammar
