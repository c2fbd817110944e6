#include "nanovllm/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "nanovllm/core/error.h"
#include "nanovllm/core/rng.h"
#include "nanovllm/kernels/cpu/token_bitmask.h"

namespace nanovllm {

namespace {

constexpr float kSamplingEps = 1e-5f;  // vLLM: temperature below this is greedy
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double log_sum_exp(const float* x, int64_t n) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  if (m == kNegInf) return m;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;  // strict: ties keep the lowest id
  return best;
}

void check_token(int64_t id, int64_t vocab, const Sequence& seq) {
  NANOVLLM_CHECK(id >= 0 && id < vocab, "request ", seq.seq_id, ": token id ", id,
                 " is outside the vocabulary [0, ", vocab, ")");
}

}  // namespace

std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int64_t k) {
  k = std::min(k, vocab);
  const double lse = log_sum_exp(logits, vocab);
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> r(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) r[i] = {idx[i], static_cast<float>(logits[idx[i]] - lse)};
  return r;
}

double token_logprob(const float* logits, int64_t vocab, int64_t id) {
  return logits[id] - log_sum_exp(logits, vocab);
}

Sampler::Sampler(std::vector<int64_t> eos_token_ids) : eos_token_ids_(std::move(eos_token_ids)) {}

std::vector<SampledToken> Sampler::sample(const float* logits, int64_t vocab,
                                          const std::vector<const Sequence*>& seqs) const {
  std::vector<SampledToken> out;
  out.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    out.push_back(sample_row(logits + static_cast<int64_t>(i) * vocab, vocab, *seqs[i]));
  return out;
}

SampledToken Sampler::sample_row(const float* raw, int64_t vocab, const Sequence& seq) const {
  NANOVLLM_CHECK(vocab >= 1, "Sampler: vocab must be >= 1, got ", vocab);
  const SamplingParams& p = seq.params;
  const int64_t num_out = seq.num_output_tokens();
  // Structured outputs: tokens the constraint refuses are -inf from here on, logprobs included (vLLM
  // applies its grammar bitmask to the logits before its sampler the same way).
  std::vector<float> masked;  // [vocab]
  if (seq.constraint) {
    std::vector<uint32_t> words(static_cast<size_t>((vocab + 31) / 32));
    if (seq.constraint->fill_bitmask(words.data(), vocab)) {
      masked.assign(raw, raw + vocab);
      const int32_t row = 0;
      cpu::apply_token_bitmask(masked.data(), vocab, vocab, words.data(), &row, 1);
      raw = masked.data();
    }
  }
  std::vector<float> x(raw, raw + vocab);  // [vocab] working logits

  // min_tokens: the request may not stop yet.
  if (num_out < p.min_tokens) {
    for (int64_t id : p.stop_token_ids) {
      check_token(id, vocab, seq);
      x[id] = kNegInf;
    }
    if (!p.ignore_eos) {
      for (int64_t id : eos_token_ids_)
        if (id >= 0 && id < vocab) x[id] = kNegInf;
    }
  }

  // logit_bias, before the penalties (vLLM's order); a suppressed id stays -inf. A zero bias is skipped so
  // the logit keeps its exact bits (-0 + 0 would turn into +0), as on the GPU.
  for (const auto& [id, bias] : p.logit_bias) {
    check_token(id, vocab, seq);
    if (bias != 0.0f) x[id] += bias;
  }

  if (p.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen(seq.token_ids.begin(), seq.token_ids.end());
    for (int32_t id : seen) {
      check_token(id, vocab, seq);
      float& v = x[id];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
  }

  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int64_t i = seq.num_prompt_tokens; i < seq.num_tokens(); ++i) ++counts[seq.token_ids[i]];
    for (const auto& [id, c] : counts) {
      check_token(id, vocab, seq);
      x[id] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
  }

  int64_t token = 0;
  if (p.temperature < kSamplingEps) {
    token = argmax(x.data(), vocab);
  } else {
    for (float& v : x) v /= p.temperature;

    // Candidates: all ids with a finite logit.
    std::vector<int32_t> keep;  // ids, any order until the draw
    keep.reserve(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i)
      if (x[i] != kNegInf) keep.push_back(i);
    if (keep.empty()) keep.push_back(static_cast<int32_t>(argmax(x.data(), vocab)));

    if (p.top_k > 0 && p.top_k < static_cast<int64_t>(keep.size())) {
      std::vector<float> vals(keep.size());
      for (size_t i = 0; i < keep.size(); ++i) vals[i] = x[keep[i]];
      std::nth_element(vals.begin(), vals.begin() + (p.top_k - 1), vals.end(), std::greater<float>());
      const float kth = vals[p.top_k - 1];
      std::erase_if(keep, [&](int32_t id) { return x[id] < kth; });
    }

    float m = kNegInf;
    for (int32_t id : keep) m = std::max(m, x[id]);
    std::vector<double> prob(static_cast<size_t>(vocab), 0.0);  // [vocab], unnormalized
    double total = 0.0;
    for (int32_t id : keep) total += prob[id] = std::exp(static_cast<double>(x[id]) - m);

    if (p.top_p < 1.0f) {
      // Smallest set of most likely tokens whose mass reaches top_p: a token is kept when the mass
      // strictly before it (sorted by prob desc, id asc) is below top_p. Sort only as far as needed.
      auto more_likely = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
      const double target = static_cast<double>(p.top_p) * total;
      size_t sorted = std::min<size_t>(64, keep.size());
      size_t cut = keep.size();
      for (;;) {
        std::partial_sort(keep.begin(), keep.begin() + sorted, keep.end(), more_likely);
        double cum = 0.0;
        size_t i = 0;
        for (; i < sorted && cum < target; ++i) cum += prob[keep[i]];
        if (cum >= target || sorted == keep.size()) {
          cut = std::max<size_t>(i, 1);
          break;
        }
        sorted = std::min(sorted * 2, keep.size());
      }
      for (size_t i = cut; i < keep.size(); ++i) prob[keep[i]] = 0.0;
      keep.resize(cut);
    }

    if (p.min_p > 0.0f) {
      double pmax = 0.0;
      for (int32_t id : keep) pmax = std::max(pmax, prob[id]);
      const double thr = static_cast<double>(p.min_p) * pmax;
      std::erase_if(keep, [&](int32_t id) { return prob[id] < thr; });
    }

    std::sort(keep.begin(), keep.end());  // the draw walks ids in order: reproducible
    double kept_mass = 0.0;
    for (int32_t id : keep) kept_mass += prob[id];
    const double u = rng_uniform(seq.rng_state, num_out) * kept_mass;
    double cum = 0.0;
    token = keep.back();
    for (int32_t id : keep) {
      cum += prob[id];
      if (u < cum) {
        token = id;
        break;
      }
    }
  }

  SampledToken r;
  r.seq_id = seq.seq_id;
  r.token_id = static_cast<int32_t>(token);
  if (p.logprobs > 0) {
    r.top_logprobs = top_logprobs(raw, vocab, p.logprobs);
    const bool present = std::any_of(r.top_logprobs.begin(), r.top_logprobs.end(),
                                     [&](const TokenLogprob& t) { return t.id == token; });
    if (!present) r.top_logprobs.push_back({token, static_cast<float>(token_logprob(raw, vocab, token))});
  }
  return r;
}

}  // namespace nanovllm
