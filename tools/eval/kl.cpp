#include "eval/kl.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

// id -> logprob, checking what the math relies on.
std::unordered_map<int64_t, double> by_id(const std::vector<TokenLogprob>& list, const char* side) {
  std::unordered_map<int64_t, double> m;
  for (const TokenLogprob& t : list) {
    NANOVLLM_CHECK(!std::isnan(t.logprob) && t.logprob <= 0.0f, "KL: ", side, " logprob of token ", t.id, " is ",
                   t.logprob, "; logprobs are <= 0");
    NANOVLLM_CHECK(m.emplace(t.id, t.logprob).second, "KL: token ", t.id, " appears twice in the ", side, " list");
  }
  return m;
}

// One cell's term p log(p / q), from the logs (exact where exp would underflow); 0 when p is 0.
double cell_term(double log_p, double log_q) {
  if (std::isinf(log_p)) return 0.0;  // p = 0 contributes nothing, whatever q is
  return std::exp(log_p) * (log_p - log_q);
}

}  // namespace

double partition_kl_lower_bound(const std::vector<TokenLogprob>& p, const std::vector<TokenLogprob>& q) {
  const auto p_by_id = by_id(p, "reference");
  const auto q_by_id = by_id(q, "compared");
  double kl = 0, p_shared = 0, q_shared = 0;
  for (const auto& [id, log_p] : p_by_id) {
    const auto it = q_by_id.find(id);
    if (it == q_by_id.end()) continue;  // only in p's list: its mass is in p's rest cell
    kl += cell_term(log_p, it->second);
    p_shared += std::exp(log_p);
    q_shared += std::exp(it->second);
  }
  // The rest cells. The logprobs are floats, so a mass that is really ~0 (the lists cover everything)
  // can come out slightly negative or as rounding noise; the floor keeps log() finite and such a cell's
  // term negligible.
  const double p_rest = std::max(1.0 - p_shared, kRestMassFloor);
  const double q_rest = std::max(1.0 - q_shared, kRestMassFloor);
  kl += cell_term(std::log(p_rest), std::log(q_rest));
  // Rounding and the floor can leave the two sides summing to not quite 1, and so a KL a hair below 0;
  // the true KL is >= 0, so 0 is still a lower bound.
  return std::max(kl, 0.0);
}

int64_t top_token(const std::vector<TokenLogprob>& list) {
  NANOVLLM_CHECK(!list.empty(), "top_token: an empty logprob list");
  const auto best = std::min_element(list.begin(), list.end(), [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.id < b.id;
  });
  return best->id;
}

}  // namespace nanovllm::eval
