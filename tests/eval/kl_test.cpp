// The first-token KL lower bound (tools/eval/kl.h) on hand-computed cases, and against the exact KL of full
// random distributions: over any top-K lists it never exceeds the true KL, and it equals it when the lists
// hold the whole vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eval/kl.h"
#include "nanovllm/engine/sampler.h"
#include "support/expect_error.h"

namespace nanovllm::eval {
namespace {

using List = std::vector<TokenLogprob>;

// A list from probabilities: the logprobs are floats, as the engine returns them.
List list(std::initializer_list<std::pair<int64_t, double>> probs) {
  List out;
  for (const auto& [id, p] : probs) out.push_back({id, static_cast<float>(std::log(p))});
  return out;
}

TEST(EvalKl, IdenticalListsGiveZero) {
  const List p = list({{7, 0.5}, {3, 0.3}, {11, 0.1}});
  EXPECT_EQ(partition_kl_lower_bound(p, p), 0.0);
  // The order of the entries does not matter.
  EXPECT_EQ(partition_kl_lower_bound(p, list({{11, 0.1}, {7, 0.5}, {3, 0.3}})), 0.0);
}

TEST(EvalKl, PartialOverlapByHand) {
  // p lists A=1 .5, B=2 .3, C=3 .1; q lists A .4, B .2, D=4 .3. Shared cells: A and B. Rest cells: p's
  // 1 - .8 = .2 (C's .1 included: it is not in q's list), q's 1 - .6 = .4 (D's .3 included).
  // KL = .5 ln(.5/.4) + .3 ln(.3/.2) + .2 ln(.2/.4) = .1115718 + .1216395 - .1386294 = 0.0945818720.
  const List p = list({{1, 0.5}, {2, 0.3}, {3, 0.1}});
  const List q = list({{1, 0.4}, {2, 0.2}, {4, 0.3}});
  EXPECT_NEAR(partition_kl_lower_bound(p, q), 0.094581871978, 1e-6);
  EXPECT_EQ(top_token(p), 1);
  EXPECT_EQ(top_token(q), 1);
}

TEST(EvalKl, DisjointListsLeaveOnlyTheRestCell) {
  // Nothing shared: both sides put all their mass (1) in the rest cell, 1 ln(1/1) = 0. The bound learns
  // nothing, though the argmax tokens differ.
  const List p = list({{1, 0.6}, {2, 0.2}});
  const List q = list({{3, 0.7}, {4, 0.1}});
  EXPECT_EQ(partition_kl_lower_bound(p, q), 0.0);
  EXPECT_NE(top_token(p), top_token(q));
}

TEST(EvalKl, RestMassesAreClampedAtTheFloor) {
  // q's list sums past 1 (.7 + .31, as float rounding can make a list that covers everything do): its
  // rest mass, 1 - 1.01 < 0, counts as the 1e-12 floor, and p's .2 of rest mass there costs a lot but stays
  // finite. .5 ln(.5/.7) + .3 ln(.3/.31) + .2 ln(.2/1e-12) = 5.026243575541.
  const List p = list({{1, 0.5}, {2, 0.3}});
  const List q = list({{1, 0.7}, {2, 0.31}});
  EXPECT_NEAR(partition_kl_lower_bound(p, q), 5.026243575541, 1e-5);
  // The other way round, the floored rest cell is p's and adds ~0:
  // .7 ln(.7/.5) + .31 ln(.31/.3) + 1e-12 ln(1e-12/.2) = 0.245695410684.
  EXPECT_NEAR(partition_kl_lower_bound(q, p), 0.245695410684, 1e-6);
  EXPECT_EQ(kRestMassFloor, 1e-12);
}

TEST(EvalKl, NeverAboveTheTrueKlAndExactOverTheWholeVocabulary) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  const int64_t vocab = 37;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> a(vocab), b(vocab);
    for (int64_t i = 0; i < vocab; ++i) {
      a[i] = logit(rng);
      b[i] = a[i] + 0.5f * logit(rng);  // related distributions, as two engine configurations give
    }
    double true_kl = 0;  // over the whole vocabulary, in double from the logits
    for (int64_t i = 0; i < vocab; ++i) {
      const double lp = token_logprob(a.data(), vocab, i), lq = token_logprob(b.data(), vocab, i);
      true_kl += std::exp(lp) * (lp - lq);
    }
    for (int64_t k : {1, 3, 10, 20}) {
      const double bound = partition_kl_lower_bound(top_logprobs(a.data(), vocab, k), top_logprobs(b.data(), vocab, k));
      EXPECT_GE(bound, 0.0);
      EXPECT_LE(bound, true_kl + 1e-6) << "trial " << trial << " k " << k;
    }
    // Every token listed: each is its own cell, the rest cells hold ~0 on both sides.
    const double full =
        partition_kl_lower_bound(top_logprobs(a.data(), vocab, vocab), top_logprobs(b.data(), vocab, vocab));
    EXPECT_NEAR(full, true_kl, 1e-5 * std::max(1.0, true_kl)) << "trial " << trial;
  }
}

TEST(EvalKl, TopTokenTiesGoToTheLowerId) {
  EXPECT_EQ(top_token({{9, -0.5f}, {4, -0.5f}, {2, -3.0f}}), 4);
  EXPECT_EQ(top_token({{5, -2.0f}, {6, -0.1f}}), 6);  // not the first entry: lists need not be sorted
}

TEST(EvalKl, BadListsAreErrors) {
  using nanovllm::testing::expect_error;
  expect_error([] { partition_kl_lower_bound({{1, -0.1f}, {1, -0.2f}}, {{1, -0.1f}}); }, {"token 1 appears twice"});
  expect_error([] { partition_kl_lower_bound({{1, -0.1f}}, {{1, 0.5f}}); }, {"logprob of token 1", "<= 0"});
  expect_error([] { partition_kl_lower_bound({{1, std::nanf("")}}, {{1, -0.1f}}); }, {"logprob of token 1"});
  expect_error([] { top_token({}); }, {"empty"});
}

}  // namespace
}  // namespace nanovllm::eval
