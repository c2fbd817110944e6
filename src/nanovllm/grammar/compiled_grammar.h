// CompiledGrammar: a grammar's automaton bound to a tokenizer's vocabulary, with the per-position token
// split that makes token masks cheap (xgrammar's idea, our code).
//
// A parse position is a state that reads bytes, at the top of some stack. For most tokens what happens
// from such a position does not depend on the rest of the stack: the token is matched (possibly through
// nested rules) without the position's rule ending, or it fails before the rule could end. Those tokens
// are "accepted" or "rejected" for the position once and for all. The rest — tokens that run past the end
// of the position's rule — are "uncertain": only the real stack can say. A token that leaves the rule for
// a byte that nothing calling the rule accepts (its FOLLOW set) is rejected as well, which keeps the
// uncertain lists short. A mask is then the union of the positions' accepted sets plus the uncertain tokens
// the real stacks accept.
//
// Partitions are computed on a position's first use and kept; thread-safe. precompute_all() does every
// position at once (warm-up, benchmarks).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nanovllm/grammar/automaton.h"
#include "nanovllm/grammar/pda.h"
#include "nanovllm/grammar/vocabulary.h"

namespace nanovllm::grammar {

struct TokenPartition {
  std::vector<uint32_t> accepted_bits;  // [bitmask_words(vocab_size)] when many are accepted, else empty
  std::vector<int32_t> accepted_ids;    // the accepted token ids when few are
  std::vector<int32_t> uncertain;       // indices into TokenVocabulary::sorted(), ascending
  int64_t num_accepted = 0;
};

class CompiledGrammar {
 public:
  CompiledGrammar(PdaTables tables, std::shared_ptr<const TokenVocabulary> vocab);

  const PdaTables& tables() const { return tables_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  // The token split for a state that reads bytes. The reference stays valid while the grammar lives.
  const TokenPartition& partition(int32_t state) const;
  // Computes every position's partition; returns how many positions there are.
  int64_t precompute_all() const;

 private:
  void compute(int32_t state, TokenPartition& out) const;  // under mu_

  PdaTables tables_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<TokenPartition>> partitions_;  // [num_states]
  mutable PdaRuntime scratch_;                                         // compute()'s parser
};

}  // namespace nanovllm::grammar
