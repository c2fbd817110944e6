// Helpers shared by the engine-core tests.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "nanovllm/engine/sequence.h"

namespace nanovllm::test {

inline std::unique_ptr<Sequence> make_seq(int64_t id, std::vector<int32_t> tokens, SamplingParams p = {}) {
  auto s = std::make_unique<Sequence>();
  s->seq_id = id;
  s->num_prompt_tokens = static_cast<int64_t>(tokens.size());
  s->token_ids = std::move(tokens);
  s->params = std::move(p);
  return s;
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int32_t lo = 1, int32_t hi = 30000) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

}  // namespace nanovllm::test
