// RULER's metrics on hand-made cases (scripts/eval/synthetic/constants.py): string_match_all is the
// fraction of references that occur in the prediction, string_match_part is 1 when any does; both
// case-insensitive, after RULER's postprocessing.
#include <gtest/gtest.h>

#include "eval/report.h"
#include "eval/scoring.h"

namespace nanovllm::eval {
namespace {

TEST(EvalScoring, StringMatchAllIsTheFractionFound) {
  EXPECT_DOUBLE_EQ(string_match_all("The numbers are 1234567 and 7654321.", {"1234567", "7654321"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all("1234567", {"1234567", "7654321", "1111111", "2222222"}), 0.25);
  EXPECT_DOUBLE_EQ(string_match_all("nothing here", {"1234567"}), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("", {"a"}), 0.0);
  // Substring semantics: a reference inside a longer token still counts (RULER's `r in pred`).
  EXPECT_DOUBLE_EQ(string_match_all("912345678", {"1234567"}), 1.0);
}

TEST(EvalScoring, StringMatchPartIsAnyFound) {
  EXPECT_DOUBLE_EQ(string_match_part("Paris, I think", {"London", "paris"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_part("Rome", {"London", "Paris"}), 0.0);
  EXPECT_DOUBLE_EQ(string_match_part("London and Paris", {"London", "Paris"}), 1.0);
}

TEST(EvalScoring, CaseInsensitive) {
  EXPECT_DOUBLE_EQ(string_match_all("vars: ABCDE fghij", {"abcde", "FGHIJ"}), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all("B52A7369-3856-4690", {"b52a7369-3856-4690"}), 1.0);
}

TEST(EvalScoring, PostprocessStripsAndTurnsControlCharactersIntoNewlines) {
  EXPECT_EQ(postprocess_prediction("  7492\t\n"), "7492");
  EXPECT_EQ(postprocess_prediction("12\x01" "34"), "12\n34");
  EXPECT_EQ(postprocess_prediction("\x02 ab \x03"), "ab");
  // A control character splits a reference: it no longer matches (as in RULER).
  EXPECT_DOUBLE_EQ(score_prediction(Metric::kStringMatchAll, "12\x01" "34", {"1234"}), 0.0);
  EXPECT_DOUBLE_EQ(score_prediction(Metric::kStringMatchAll, " 1234.\n", {"1234"}), 1.0);
  EXPECT_DOUBLE_EQ(score_prediction(Metric::kStringMatchPart, "x", {"y", "X"}), 1.0);
}

TEST(EvalScoring, TableAveragesLikeRuler) {
  ScoreTable t({"a", "b"}, {4096, 8192});
  t.add("a", 4096, 1.0, 100);
  t.add("a", 4096, 0.5, 100);
  t.add("a", 4096, 0.25, 100);  // mean 0.5833.. -> 58.33
  t.add("b", 4096, 1.0, 100);
  t.add("a", 8192, 0.0, 200);
  EXPECT_DOUBLE_EQ(t.score(0, 0), 58.33);
  EXPECT_DOUBLE_EQ(t.score(1, 0), 100.0);
  EXPECT_DOUBLE_EQ(t.score(0, 1), 0.0);
  EXPECT_TRUE(std::isnan(t.score(1, 1)));
  EXPECT_NEAR(t.context_mean(0), 79.165, 0.006);  // (58.33 + 100) / 2, to 2 decimals
  EXPECT_DOUBLE_EQ(t.context_mean(1), 0.0);    // empty cells are left out
  const auto j = t.to_json("task");
  EXPECT_EQ(j["cells"][0]["passed"], 2);  // scores >= 0.5
  EXPECT_EQ(j["scores"]["b"]["8192"], nullptr);
  EXPECT_NE(t.format("task").find("mean"), std::string::npos);
  EXPECT_EQ(context_label(131072), "128K");
  EXPECT_EQ(context_label(1000), "1000");
}

}  // namespace
}  // namespace nanovllm::eval
