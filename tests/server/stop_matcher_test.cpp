#include "nanovllm/server/stop_matcher.h"

#include <gtest/gtest.h>

namespace nanovllm::server {
namespace {

// Feeds `pieces` one by one; returns everything emitted (including flush) and whether it stopped.
std::pair<std::string, bool> feed(std::vector<std::string> stop, const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stop));
  std::string out;
  for (const std::string& p : pieces) out += m.add(p);
  out += m.flush();
  return {out, m.stopped()};
}

TEST(StopMatcher, HoldsBackAPossibleStartUntilDisambiguated) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.add("ab#"), "ab");
  EXPECT_EQ(m.add("#"), "");
  EXPECT_EQ(m.add("x"), "##x");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopAcrossPiecesIsCutAndNothingAfterIt) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.add("hello E"), "hello ");
  EXPECT_EQ(m.add("NDtail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.add("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  EXPECT_EQ(feed({"zz", "b"}, {"a", "bzz"}), std::make_pair(std::string("a"), true));
  EXPECT_EQ(feed({"cd", "bcdx"}, {"ab", "cdx"}), std::make_pair(std::string("a"), true));  // bcdx starts first
}

TEST(StopMatcher, NoStopPassesEverythingThrough) {
  StopMatcher m(std::vector<std::string>{});
  EXPECT_EQ(m.add("abc"), "abc");
  EXPECT_EQ(feed({"q"}, {"ab", "c", "d"}), std::make_pair(std::string("abcd"), false));
  // A held-back prefix that never completes is released at the end.
  EXPECT_EQ(feed({"xyz"}, {"abx", "y"}), std::make_pair(std::string("abxy"), false));
}

TEST(StopMatcher, MultiByteStopStrings) {
  // "世界" split at a character boundary over pieces; overlapping self-similar stop "aab".
  EXPECT_EQ(feed({"世界"}, {"你好世", "界!"}), std::make_pair(std::string("你好"), true));
  EXPECT_EQ(feed({"aab"}, {"a", "a", "a", "b", "c"}), std::make_pair(std::string("a"), true));
}

TEST(StopMatcher, RandomSplitsAgreeWithWholeString) {
  const std::string text = "the quick brown fox jumps over the lazy dog; the end";
  for (const std::string stop : {"fox", "the end", "dog;", "zzz", "e l"}) {
    const size_t at = text.find(stop);
    const std::string want = at == std::string::npos ? text : text.substr(0, at);
    for (size_t step = 1; step <= 7; ++step) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < text.size(); i += step) pieces.push_back(text.substr(i, step));
      EXPECT_EQ(feed({stop}, pieces).first, want) << stop << " step " << step;
    }
  }
}

}  // namespace
}  // namespace nanovllm::server
