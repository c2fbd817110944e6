// The generators' PRNG: pinned outputs (an independent Python xoshiro256** gave them), unbiased bounded
// draws, distinct samples, and seeds that depend on every part of a sample's identity.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "eval/rng.h"

namespace nanovllm::eval {
namespace {

TEST(EvalRng, MatchesReferenceXoshiro256StarStar) {
  Rng rng(42);
  EXPECT_EQ(rng.next(), 0x5c8961e1f2055d33ull);
  EXPECT_EQ(rng.next(), 0xe182e8e848466886ull);
  EXPECT_EQ(rng.next(), 0x9f7313650e290a18ull);
}

TEST(EvalRng, BoundedDrawsStayInRangeAndCoverIt) {
  Rng rng(7);
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t x = rng.below(10);
    ASSERT_LT(x, 10u);
    ++counts[x];
  }
  for (int c : counts) EXPECT_GT(c, 850);  // 1000 expected each
  for (int i = 0; i < 1000; ++i) {
    const int64_t x = rng.range(-3, 3);
    ASSERT_GE(x, -3);
    ASSERT_LE(x, 3);
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_EQ(rng.below(1), 0u);
}

TEST(EvalRng, SampleGivesDistinctIndices) {
  Rng rng(3);
  for (size_t n : {1u, 5u, 40u, 1000u}) {
    for (size_t k : {size_t{0}, size_t{1}, std::min<size_t>(n, 4), n}) {
      const std::vector<size_t> s = rng.sample(n, k);
      ASSERT_EQ(s.size(), k);
      EXPECT_EQ(std::set<size_t>(s.begin(), s.end()).size(), k);
      for (size_t x : s) EXPECT_LT(x, n);
    }
  }
}

TEST(EvalRng, ShuffleIsAPermutationAndSeeded) {
  std::vector<int> a(100), b;
  for (int i = 0; i < 100; ++i) a[i] = i;
  b = a;
  Rng r1(5), r2(5);
  r1.shuffle(a);
  r2.shuffle(b);
  EXPECT_EQ(a, b);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(EvalRng, SampleSeedDependsOnEveryPart) {
  const uint64_t base = sample_seed(42, "niah_single_1", 4096, 0);
  EXPECT_EQ(base, sample_seed(42, "niah_single_1", 4096, 0));
  EXPECT_NE(base, sample_seed(43, "niah_single_1", 4096, 0));
  EXPECT_NE(base, sample_seed(42, "niah_single_2", 4096, 0));
  EXPECT_NE(base, sample_seed(42, "niah_single_1", 8192, 0));
  EXPECT_NE(base, sample_seed(42, "niah_single_1", 4096, 1));
}

}  // namespace
}  // namespace nanovllm::eval
