#include "nanovllm/grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "nanovllm/core/error.h"

namespace nanovllm::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), rt_(grammar_->tables()) {
  rt_.reset_to_root();
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  const size_t start = rt_.num_steps();
  for (char c : bytes) {
    if (!rt_.advance(static_cast<uint8_t>(c))) {
      if (rt_.num_steps() > start) rt_.pop_steps(rt_.num_steps() - start);
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_) return false;
  const TokenVocabulary& vocab = grammar_->vocab();
  const size_t start = rt_.num_steps();
  if (vocab.is_stop(id)) {
    if (!rt_.can_end()) return false;
    terminated_ = true;
    token_steps_.push_back(start);
    return true;
  }
  if (!vocab.matches_text(id) || !accept_bytes(vocab.bytes(id))) return false;
  token_steps_.push_back(start);
  return true;
}

void GrammarMatcher::rollback(size_t num_tokens) {
  NANOVLLM_CHECK(num_tokens <= token_steps_.size(), "grammar matcher: cannot roll back ", num_tokens, " tokens (",
                 token_steps_.size(), " accepted)");
  if (num_tokens == 0) return;
  const size_t steps = token_steps_[token_steps_.size() - num_tokens];
  token_steps_.resize(token_steps_.size() - num_tokens);
  if (rt_.num_steps() > steps) rt_.pop_steps(rt_.num_steps() - steps);
  terminated_ = false;
}

void GrammarMatcher::fill_next_token_bitmask(uint32_t* words) {
  const TokenVocabulary& vocab = grammar_->vocab();
  const int64_t num_words = bitmask_words(vocab.vocab_size());
  std::memset(words, 0, static_cast<size_t>(num_words) * sizeof(uint32_t));
  if (terminated_) return;

  // The positions at the stacks' tops, each once.
  states_.clear();
  for (int32_t node : rt_.tops()) states_.push_back(rt_.node_state(node));
  std::sort(states_.begin(), states_.end());
  states_.erase(std::unique(states_.begin(), states_.end()), states_.end());
  uncertain_.clear();
  for (int32_t state : states_) {
    const TokenPartition& p = grammar_->partition(state);
    if (!p.accepted_bits.empty()) {
      for (int64_t w = 0; w < num_words; ++w) words[w] |= p.accepted_bits[static_cast<size_t>(w)];
    } else {
      for (int32_t id : p.accepted_ids) bitmask_set(words, id);
    }
    uncertain_.insert(uncertain_.end(), p.uncertain.begin(), p.uncertain.end());
  }
  if (states_.size() > 1) {
    std::sort(uncertain_.begin(), uncertain_.end());
    uncertain_.erase(std::unique(uncertain_.begin(), uncertain_.end()), uncertain_.end());
  }

  // Uncertain tokens against the real stacks, in sorted order: each rolls back only to the prefix it shares
  // with the previous one, and a rejected prefix skips the tokens that start with it.
  const std::span<const int32_t> sorted = vocab.sorted();
  const size_t base = rt_.num_steps();
  std::string_view prev, rejected;
  size_t depth = 0;  // bytes of prev held by rt_ beyond base
  for (int32_t index : uncertain_) {
    const int32_t id = sorted[static_cast<size_t>(index)];
    if (bitmask_test(words, id)) continue;
    const std::string_view tok = vocab.sorted_bytes(static_cast<size_t>(index));
    if (!rejected.empty() && tok.starts_with(rejected)) continue;
    size_t common = 0;
    while (common < depth && common < tok.size() && prev[common] == tok[common]) ++common;
    if (depth > common) rt_.pop_steps(depth - common);
    depth = common;
    while (depth < tok.size() && rt_.advance(static_cast<uint8_t>(tok[depth]))) ++depth;
    if (depth == tok.size()) {
      bitmask_set(words, id);
    } else {
      rejected = tok.substr(0, depth + 1);
    }
    prev = tok;
  }
  if (depth > 0) rt_.pop_steps(depth);
  NANOVLLM_ASSERT(rt_.num_steps() == base, "mask computation left the parser moved");

  if (rt_.can_end())
    for (int32_t id : vocab.stop_ids()) bitmask_set(words, id);
}

}  // namespace nanovllm::grammar
