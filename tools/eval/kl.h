// KL divergence between two next-token distributions known only through their top-K logprob lists (what
// the engine returns: log_softmax of the raw logits, best first). The vocabulary is partitioned into the
// tokens present in BOTH lists (one cell each, its probability exact on both sides) and one "rest" cell
// holding the remaining mass of each side. By the data-processing inequality, KL over any partition is at
// most the true KL, so this is a rigorous lower bound; it is tight when the lists cover (almost) all of
// the mass, and exactly 0 for identical lists.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/engine/sequence.h"

namespace nanovllm::eval {

// Rest masses below this count as this (see partition_kl_lower_bound).
constexpr double kRestMassFloor = 1e-12;

// KL(p || q) in nats over the partition above, >= 0. `p` and `q` are top-K lists (any order, ids distinct
// within a list, logprobs <= 0); an id in only one list falls into the rest cell. nanovllm::Error on a
// repeated id or a logprob that is NaN or > 0.
double partition_kl_lower_bound(const std::vector<TokenLogprob>& p, const std::vector<TokenLogprob>& q);

// The list's most likely token (ties: the lower id, as greedy sampling picks); nanovllm::Error when empty.
int64_t top_token(const std::vector<TokenLogprob>& list);

}  // namespace nanovllm::eval
