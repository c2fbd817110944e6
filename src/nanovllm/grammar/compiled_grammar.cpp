#include "nanovllm/grammar/compiled_grammar.h"

#include <algorithm>

#include "nanovllm/core/error.h"

namespace nanovllm::grammar {

CompiledGrammar::CompiledGrammar(PdaTables tables, std::shared_ptr<const TokenVocabulary> vocab)
    : tables_(std::move(tables)), vocab_(std::move(vocab)), scratch_(tables_) {
  NANOVLLM_CHECK(vocab_ != nullptr, "CompiledGrammar: no vocabulary");
  partitions_.resize(static_cast<size_t>(tables_.num_states()));
}

const TokenPartition& CompiledGrammar::partition(int32_t state) const {
  NANOVLLM_ASSERT(state >= 0 && state < tables_.num_states() &&
                      (tables_.flags[static_cast<size_t>(state)] & PdaTables::kReadsBytes),
                  "partition of state ", state, " which reads no byte");
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<TokenPartition>& slot = partitions_[static_cast<size_t>(state)];
  if (!slot) {
    auto p = std::make_unique<TokenPartition>();
    compute(state, *p);
    slot = std::move(p);
  }
  return *slot;
}

int64_t CompiledGrammar::precompute_all() const {
  int64_t n = 0;
  for (int32_t s = 0; s < tables_.num_states(); ++s) {
    if (!(tables_.flags[static_cast<size_t>(s)] & PdaTables::kReadsBytes)) continue;
    partition(s);
    ++n;
  }
  return n;
}

// One walk over the sorted vocabulary from a lone frame at `state`: each token is advanced from the prefix
// it shares with the one before, and a token that fails at byte j settles every following token that
// shares its first j + 1 bytes. While the path stays in "simple" states (no calls, not accepting: the
// stack cannot change) it is followed in the DFA table alone; the parser (scratch_) catches up only when
// a token reaches a state where rules are entered or may end.
void CompiledGrammar::compute(int32_t state, TokenPartition& out) const {
  const TokenVocabulary& vocab = *vocab_;
  const std::span<const int32_t> sorted = vocab.sorted();
  const std::span<const uint16_t> lcp = vocab.lcp();
  const ByteSet& follow = tables_.follow[static_cast<size_t>(tables_.state_rule[static_cast<size_t>(state)])];
  auto simple = [&](int32_t s) {
    return !(tables_.flags[static_cast<size_t>(s)] & PdaTables::kAccepting) &&
           tables_.call_begin[static_cast<size_t>(s)] == tables_.call_begin[static_cast<size_t>(s) + 1];
  };
  const size_t n = sorted.size();
  std::vector<int32_t> accepted;
  std::vector<int32_t> fast{state};  // fast[k]: the DFA state after k bytes, while every one is simple
  scratch_.reset_to_state(state);
  size_t slow_depth = 0;  // bytes of the current token held by scratch_ (steps = slow_depth + 1)
  size_t depth = 0;       // bytes of the previous token that were matched
  size_t i = 0;
  while (i < n) {
    const std::string_view tok = vocab.sorted_bytes(i);
    const size_t common = std::min<size_t>(lcp[i], depth);
    if (fast.size() > common + 1) fast.resize(common + 1);
    if (slow_depth > common) {
      scratch_.pop_steps(slow_depth - common);
      slow_depth = common;
    }
    size_t d = common;
    bool escaped_possible = false;
    while (d < tok.size() && fast.size() == d + 1) {
      const int32_t next = tables_.step(fast[d], static_cast<uint8_t>(tok[d]));
      if (next < 0 || !simple(next)) break;
      fast.push_back(next);
      ++d;
    }
    if (d < tok.size() && fast.size() == d + 1 && tables_.step(fast[d], static_cast<uint8_t>(tok[d])) < 0) {
      // Failed inside simple states: no rule could end on the way, so nothing outside can help.
    } else if (d < tok.size()) {
      while (slow_depth < d) {
        const bool ok = scratch_.advance(static_cast<uint8_t>(tok[slow_depth]));
        NANOVLLM_ASSERT(ok, "the parser refused bytes the DFA accepted");
        ++slow_depth;
      }
      while (d < tok.size() && scratch_.advance(static_cast<uint8_t>(tok[d]))) slow_depth = ++d;
      escaped_possible = d < tok.size();
    }
    depth = d;
    if (d == tok.size()) {
      accepted.push_back(sorted[i]);
      ++i;
      continue;
    }
    // Failed at byte d. Uncertain if the rule could end after some k <= d bytes with the next byte one
    // that a caller may read.
    bool uncertain = false;
    for (size_t k = 0; escaped_possible && k <= d && !uncertain; ++k)
      uncertain = scratch_.can_end_at(k) && follow.test(static_cast<uint8_t>(tok[k]));
    // Every token starting with tok[0..d] fails the same way: they follow tok in sorted order.
    const std::string_view prefix = tok.substr(0, d + 1);
    size_t lo = i + 1, hi = n;  // the first index past the run
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (vocab.sorted_bytes(mid).starts_with(prefix)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const size_t end = lo;
    if (uncertain)
      for (size_t k = i; k < end; ++k) out.uncertain.push_back(static_cast<int32_t>(k));
    i = end;
  }
  if (slow_depth > 0) scratch_.pop_steps(slow_depth);
  out.num_accepted = static_cast<int64_t>(accepted.size());
  const int64_t words = bitmask_words(vocab.vocab_size());
  if (out.num_accepted > words) {
    out.accepted_bits.assign(static_cast<size_t>(words), 0);
    for (int32_t id : accepted) bitmask_set(out.accepted_bits.data(), id);
  } else {
    out.accepted_ids = std::move(accepted);
  }
}

}  // namespace nanovllm::grammar
