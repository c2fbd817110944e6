// The length fitter: the largest unit count within the budget, for linear, irregular and capped prompts.
#include <gtest/gtest.h>

#include "eval/fit.h"

namespace nanovllm::eval {
namespace {

// One "token" per byte.
std::vector<int32_t> bytes(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

TEST(EvalFit, FindsTheLargestUnitCountThatFits) {
  for (int64_t per_unit : {1, 7, 90}) {
    for (int64_t budget : {100, 1001, 4096, 100000}) {
      auto prompt = [&](int64_t n) { return std::string(50, 'h') + std::string(static_cast<size_t>(n * per_unit), 'x'); };
      const FitResult r = fit_to_budget(prompt, bytes, 0, 1 << 30, budget);
      ASSERT_TRUE(r.fits);
      EXPECT_EQ(r.units, (budget - 50) / per_unit) << per_unit << " " << budget;
      EXPECT_EQ(static_cast<int64_t>(r.ids.size()), 50 + r.units * per_unit);
      EXPECT_EQ(r.text, prompt(r.units));
      EXPECT_LE(r.encodes, 8) << "per unit " << per_unit << " budget " << budget;
    }
  }
}

TEST(EvalFit, IrregularUnitsStillEndJustBelowTheBudget) {
  // Unit i adds 1 + (i * 7919 % 13) tokens: no constant rate.
  auto prompt = [](int64_t n) {
    std::string s = "prefix";
    for (int64_t i = 0; i < n; ++i) s.append(static_cast<size_t>(1 + (i * 7919) % 13), 'y');
    return s;
  };
  for (int64_t budget : {64, 500, 3000, 20000}) {
    const FitResult r = fit_to_budget(prompt, bytes, 1, 1 << 20, budget);
    ASSERT_TRUE(r.fits);
    EXPECT_LE(static_cast<int64_t>(r.ids.size()), budget);
    EXPECT_GT(static_cast<int64_t>(prompt(r.units + 1).size()), budget);
  }
}

TEST(EvalFit, CapsAtMaxUnitsAndReportsPromptsThatNeverFit) {
  auto prompt = [](int64_t n) { return std::string(static_cast<size_t>(10 + n), 'z'); };
  FitResult r = fit_to_budget(prompt, bytes, 0, 40, 1000);
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(r.units, 40);
  r = fit_to_budget(prompt, bytes, 5, 40, 12);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(r.min_tokens, 15);
  r = fit_to_budget(prompt, bytes, 5, 5, 100);
  ASSERT_TRUE(r.fits);
  EXPECT_EQ(r.units, 5);
}

}  // namespace
}  // namespace nanovllm::eval
