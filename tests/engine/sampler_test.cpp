#include "nanovllm/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "engine/test_util.h"
#include "nanovllm/core/rng.h"

using namespace nanovllm;
using nanovllm::test::make_seq;

namespace {

std::vector<float> random_logits(std::mt19937& rng, int64_t v, float lo = -3.0f, float hi = 3.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> x(static_cast<size_t>(v));
  for (auto& e : x) e = d(rng);
  return x;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

// Independent reference: softmax(x / T) in long double, restricted to `allowed` and renormalized.
std::vector<double> softmax_on(const std::vector<float>& x, double t, const std::vector<bool>& allowed) {
  long double m = -INFINITY, s = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (allowed[i]) m = std::max<long double>(m, x[i] / t);
  std::vector<double> p(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i)
    if (allowed[i]) s += std::exp(x[i] / t - m);
  for (size_t i = 0; i < x.size(); ++i)
    if (allowed[i]) p[i] = static_cast<double>(std::exp(x[i] / t - m) / s);
  return p;
}

// Draws n tokens, each with a different per-request key, and returns the empirical frequencies.
std::vector<double> frequencies(const Sampler& sampler, const std::vector<float>& x, SamplingParams p, int n) {
  auto seq = make_seq(1, {0}, p);
  std::vector<double> f(x.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    seq->rng_state = rng_key_from_seed(static_cast<uint64_t>(i));
    f[sampler.sample_row(x.data(), static_cast<int64_t>(x.size()), *seq).token_id] += 1.0 / n;
  }
  return f;
}

void expect_distribution(const std::vector<double>& freq, const std::vector<double>& want, double tol) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(freq[i], 0.0) << "token " << i << " is outside the allowed support";
    } else {
      EXPECT_NEAR(freq[i], want[i], tol) << "token " << i;
    }
  }
}

constexpr int kDraws = 20000;
constexpr double kTol = 0.015;  // ~4 sigma for p = 0.5 at 20000 draws

}  // namespace

TEST(Sampler, RngUniformIsInRangeAndVaries) {
  std::map<uint64_t, int> seen;
  double mean = 0.0;
  for (int64_t step = 0; step < 10000; ++step) {
    const double u = rng_uniform(rng_key_from_seed(7), step);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u / 10000;
  }
  EXPECT_NEAR(mean, 0.5, 0.01);
  EXPECT_NE(rng_uniform(rng_key_from_seed(1), 0), rng_uniform(rng_key_from_seed(2), 0));
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  std::mt19937 rng(1);
  Sampler sampler;
  const int64_t v = 1001;
  for (int row = 0; row < 20; ++row) {
    auto x = random_logits(rng, v);
    auto seq = make_seq(1, {3, 4}, greedy());
    const auto want = std::max_element(x.begin(), x.end()) - x.begin();
    EXPECT_EQ(sampler.sample_row(x.data(), v, *seq).token_id, want);
  }
  std::vector<float> tie(17, -1.0f);
  tie[9] = tie[5] = 2.5f;
  auto seq = make_seq(1, {3}, greedy());
  EXPECT_EQ(sampler.sample_row(tie.data(), 17, *seq).token_id, 5);
}

TEST(Sampler, BatchRowsAreIndependent) {
  std::mt19937 rng(2);
  const int64_t v = 33;
  auto x = random_logits(rng, 3 * v);
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<const Sequence*> ptrs;
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(make_seq(10 + i, {1}, greedy()));
    ptrs.push_back(seqs.back().get());
  }
  auto out = Sampler().sample(x.data(), v, ptrs);
  ASSERT_EQ(out.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].seq_id, 10 + i);
    EXPECT_EQ(out[i].token_id, std::max_element(x.begin() + i * v, x.begin() + (i + 1) * v) - (x.begin() + i * v));
  }
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::mt19937 rng(3);
  Sampler sampler;
  const int64_t v = 257;
  for (int row = 0; row < 50; ++row) {
    auto x = random_logits(rng, v);
    SamplingParams p;
    p.temperature = 1.3f;
    p.top_k = 1;
    auto seq = make_seq(1, {3}, p);
    seq->rng_state = rng_key_from_seed(static_cast<uint64_t>(row));
    EXPECT_EQ(sampler.sample_row(x.data(), v, *seq).token_id, std::max_element(x.begin(), x.end()) - x.begin());
  }
}

TEST(Sampler, TemperatureSamplingMatchesSoftmax) {
  std::mt19937 rng(4);
  auto x = random_logits(rng, 12, -2.0f, 2.0f);
  SamplingParams p;
  p.temperature = 0.7f;
  auto f = frequencies(Sampler(), x, p, kDraws);
  expect_distribution(f, softmax_on(x, 0.7, std::vector<bool>(x.size(), true)), kTol);
}

TEST(Sampler, TopKRestrictsSupport) {
  std::mt19937 rng(5);
  auto x = random_logits(rng, 12, -2.0f, 2.0f);
  SamplingParams p;
  p.top_k = 3;
  std::vector<float> sorted = x;
  std::sort(sorted.rbegin(), sorted.rend());
  std::vector<bool> allowed(x.size());
  for (size_t i = 0; i < x.size(); ++i) allowed[i] = x[i] >= sorted[2];
  expect_distribution(frequencies(Sampler(), x, p, kDraws), softmax_on(x, 1.0, allowed), kTol);
}

TEST(Sampler, TopPRestrictsSupport) {
  std::mt19937 rng(6);
  auto x = random_logits(rng, 12, -2.0f, 2.0f);
  SamplingParams p;
  p.top_p = 0.6f;
  const auto full = softmax_on(x, 1.0, std::vector<bool>(x.size(), true));
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return full[a] > full[b]; });
  std::vector<bool> allowed(x.size(), false);
  double cum = 0.0;
  for (size_t i : order) {  // smallest prefix reaching 0.6
    allowed[i] = true;
    cum += full[i];
    if (cum >= 0.6) break;
  }
  const int64_t n_allowed = std::count(allowed.begin(), allowed.end(), true);
  ASSERT_GT(n_allowed, 1);
  ASSERT_LT(n_allowed, 12);
  expect_distribution(frequencies(Sampler(), x, p, kDraws), softmax_on(x, 1.0, allowed), kTol);
}

TEST(Sampler, TopPOnALargeVocabKeepsTheNucleus) {
  // Exercises the incremental partial sort: a flat 5000-token vocab where the nucleus is ~2000 tokens.
  std::mt19937 rng(7);
  const int64_t v = 5000;
  auto x = random_logits(rng, v, -0.5f, 0.5f);
  SamplingParams p;
  p.top_p = 0.4f;
  const auto full = softmax_on(x, 1.0, std::vector<bool>(v, true));
  std::vector<double> sorted = full;
  std::sort(sorted.rbegin(), sorted.rend());
  double cum = 0.0;
  double thr = 0.0;  // the smallest kept probability
  for (double q : sorted) {
    cum += q;
    thr = q;
    if (cum >= 0.4) break;
  }
  auto seq = make_seq(1, {0}, p);
  for (int i = 0; i < 500; ++i) {
    seq->rng_state = rng_key_from_seed(static_cast<uint64_t>(i));
    const int32_t t = Sampler().sample_row(x.data(), v, *seq).token_id;
    ASSERT_GE(full[t], thr) << "token " << t << " outside the nucleus";
  }
}

TEST(Sampler, MinPRestrictsSupport) {
  std::mt19937 rng(8);
  auto x = random_logits(rng, 12, -2.0f, 2.0f);
  SamplingParams p;
  p.min_p = 0.3f;
  p.temperature = 0.9f;
  const auto full = softmax_on(x, 0.9, std::vector<bool>(x.size(), true));
  const double pmax = *std::max_element(full.begin(), full.end());
  std::vector<bool> allowed(x.size());
  for (size_t i = 0; i < x.size(); ++i) allowed[i] = full[i] >= 0.3 * pmax;
  const int64_t n_allowed = std::count(allowed.begin(), allowed.end(), true);
  ASSERT_GT(n_allowed, 1);
  ASSERT_LT(n_allowed, 12);
  expect_distribution(frequencies(Sampler(), x, p, kDraws), softmax_on(x, 0.9, allowed), kTol);
}

TEST(Sampler, SeededRequestsAreDeterministic) {
  std::mt19937 rng(9);
  const int64_t v = 500;
  auto x = random_logits(rng, v, -1.0f, 1.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  auto run = [&](uint64_t key) {
    auto seq = make_seq(1, {1, 2, 3}, p);
    seq->rng_state = key;
    for (int i = 0; i < 30; ++i) seq->token_ids.push_back(Sampler().sample_row(x.data(), v, *seq).token_id);
    return seq->token_ids;
  };
  EXPECT_EQ(run(rng_key_from_seed(42)), run(rng_key_from_seed(42)));
  EXPECT_NE(run(rng_key_from_seed(42)), run(rng_key_from_seed(43)));

  // The draw does not depend on the other rows in the batch.
  auto a = make_seq(1, {1}, p);
  auto b = make_seq(2, {1}, p);
  a->rng_state = rng_key_from_seed(5);
  b->rng_state = rng_key_from_seed(6);
  std::vector<float> two(x);
  two.insert(two.end(), x.begin(), x.end());
  auto batched = Sampler().sample(two.data(), v, {b.get(), a.get()});
  EXPECT_EQ(batched[1].token_id, Sampler().sample_row(x.data(), v, *a).token_id);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  Sampler sampler;
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  std::vector<float> x{2.0f, 1.5f, -1.0f, -1.2f};
  EXPECT_EQ(sampler.sample_row(x.data(), 4, *make_seq(1, {3}, greedy())).token_id, 0);
  EXPECT_EQ(sampler.sample_row(x.data(), 4, *make_seq(1, {0, 2}, p)).token_id, 1);  // 2.0 / 2 < 1.5
  std::vector<float> neg{-0.5f, -0.8f, -3.0f};
  EXPECT_EQ(sampler.sample_row(neg.data(), 3, *make_seq(1, {0}, p)).token_id, 1);  // -0.5 * 2 < -0.8
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOutputTokensOnly) {
  Sampler sampler;
  std::vector<float> x{3.0f, 2.0f, 0.0f};
  SamplingParams f = greedy();
  f.frequency_penalty = 0.5f;
  auto s = make_seq(1, {2}, f);
  s->token_ids.insert(s->token_ids.end(), {0, 0, 0});  // 3 outputs of token 0: 3 - 1.5 < 2
  EXPECT_EQ(sampler.sample_row(x.data(), 3, *s).token_id, 1);
  s->token_ids.resize(2);  // one output of token 0: 3 - 0.5 > 2
  EXPECT_EQ(sampler.sample_row(x.data(), 3, *s).token_id, 0);

  SamplingParams pr = greedy();
  pr.presence_penalty = 1.5f;
  auto t = make_seq(2, {2}, pr);
  t->token_ids.push_back(0);  // 3 - 1.5 < 2
  EXPECT_EQ(sampler.sample_row(x.data(), 3, *t).token_id, 1);

  // Prompt occurrences are not penalized by frequency: token 1 appears 5 times in the prompt only.
  std::vector<float> y{3.0f, 3.2f};
  auto u = make_seq(3, {1, 1, 1, 1, 1}, f);
  u->token_ids.push_back(0);
  EXPECT_EQ(sampler.sample_row(y.data(), 2, *u).token_id, 1);
}

TEST(Sampler, PenaltiesMatchAnIndependentComputation) {
  std::mt19937 rng(10);
  Sampler sampler;
  const int64_t v = 61;
  std::uniform_int_distribution<int32_t> tok(0, v - 1);
  std::uniform_real_distribution<float> pen(-2.0f, 2.0f);
  for (int row = 0; row < 200; ++row) {
    auto x = random_logits(rng, v);
    SamplingParams p = greedy();
    p.repetition_penalty = 0.5f + (pen(rng) + 2.0f) / 2.0f;
    p.frequency_penalty = pen(rng);
    p.presence_penalty = pen(rng);
    std::vector<int32_t> prompt(7), output(9);
    for (auto& t : prompt) t = tok(rng);
    for (auto& t : output) t = tok(rng);
    auto s = make_seq(1, prompt, p);
    s->token_ids.insert(s->token_ids.end(), output.begin(), output.end());
    std::vector<double> ref(x.begin(), x.end());
    std::vector<bool> seen(v, false);
    std::vector<int> count(v, 0);
    for (int32_t t : prompt) seen[t] = true;
    for (int32_t t : output) seen[t] = true, ++count[t];
    for (int64_t i = 0; i < v; ++i) {
      if (seen[i]) ref[i] = ref[i] > 0 ? ref[i] / p.repetition_penalty : ref[i] * p.repetition_penalty;
      ref[i] -= p.frequency_penalty * count[i] + (count[i] > 0 ? p.presence_penalty : 0.0);
    }
    std::vector<double> sorted = ref;
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted[0] - sorted[1] < 1e-4) continue;  // too close to call in fp32
    EXPECT_EQ(sampler.sample_row(x.data(), v, *s).token_id, std::max_element(ref.begin(), ref.end()) - ref.begin());
  }
}

TEST(Sampler, MinTokensSuppressesEosAndStopIds) {
  Sampler sampler({3});
  std::vector<float> x{0.0f, 1.0f, -1.0f, 5.0f, 0.5f, 0.2f, -2.0f, 4.0f};
  SamplingParams p = greedy();
  p.min_tokens = 2;
  p.stop_token_ids = {7};
  auto s = make_seq(1, {0}, p);
  EXPECT_EQ(sampler.sample_row(x.data(), 8, *s).token_id, 1);  // eos 3 and stop 7 masked
  p.ignore_eos = true;
  auto t = make_seq(2, {0}, p);
  EXPECT_EQ(sampler.sample_row(x.data(), 8, *t).token_id, 3);  // ignore_eos: eos is not suppressed
  s->token_ids.insert(s->token_ids.end(), {4, 4});            // min_tokens reached
  EXPECT_EQ(sampler.sample_row(x.data(), 8, *s).token_id, 3);
  // Random sampling never returns a suppressed id either.
  SamplingParams r;
  r.min_tokens = 5;
  r.stop_token_ids = {7};
  auto u = make_seq(3, {0}, r);
  for (int i = 0; i < 500; ++i) {
    u->rng_state = rng_key_from_seed(static_cast<uint64_t>(i));
    const int32_t id = sampler.sample_row(x.data(), 8, *u).token_id;
    ASSERT_NE(id, 3);
    ASSERT_NE(id, 7);
  }
}

TEST(Sampler, LogprobsMatchAnIndependentLogSoftmax) {
  std::mt19937 rng(11);
  const int64_t v = 301;
  auto x = random_logits(rng, v, -8.0f, 8.0f);
  long double m = *std::max_element(x.begin(), x.end()), s = 0;
  for (float e : x) s += std::exp(e - m);
  const long double lse = m + std::log(s);
  SamplingParams p;
  p.logprobs = 5;
  p.temperature = 0.8f;
  p.repetition_penalty = 1.3f;  // logprobs come from the raw logits, not the penalized ones
  auto seq = make_seq(1, {1, 2, 3}, p);
  const SampledToken t = Sampler().sample_row(x.data(), v, *seq);
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  ASSERT_GE(t.top_logprobs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.top_logprobs[i].id, order[i]);
    EXPECT_NEAR(t.top_logprobs[i].logprob, static_cast<double>(x[order[i]] - lse), 1e-5);
  }
  const bool in_top = std::find(order.begin(), order.begin() + 5, t.token_id) != order.begin() + 5;
  EXPECT_EQ(t.top_logprobs.size(), in_top ? 5u : 6u);
  EXPECT_TRUE(std::any_of(t.top_logprobs.begin(), t.top_logprobs.end(), [&](const TokenLogprob& e) {
    return e.id == t.token_id && std::abs(e.logprob - static_cast<double>(x[t.token_id] - lse)) < 1e-5;
  }));
}

TEST(Sampler, SampledTokenOutsideTopKIsAppended) {
  std::vector<float> x{5.0f, 4.0f, 3.0f, 2.0f, 1.0f};
  SamplingParams p = greedy();
  p.logprobs = 2;
  p.repetition_penalty = 10.0f;  // 0 and 1 become 0.5 and 0.4: greedy picks 2
  auto seq = make_seq(1, {0, 1}, p);
  const SampledToken t = Sampler().sample_row(x.data(), 5, *seq);
  EXPECT_EQ(t.token_id, 2);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].id, 0);
  EXPECT_EQ(t.top_logprobs[1].id, 1);
  EXPECT_EQ(t.top_logprobs[2].id, 2);
  double s = 0;
  for (float e : x) s += std::exp(e - 5.0);
  EXPECT_NEAR(t.top_logprobs[2].logprob, 3.0 - (5.0 + std::log(s)), 1e-6);
  EXPECT_TRUE(Sampler().sample_row(x.data(), 5, *make_seq(2, {0}, greedy())).top_logprobs.empty());
}
