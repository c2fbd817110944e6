// EBNF parsing and printing, regular expressions, UTF-8 classes: what texts a grammar matches.
#include <gtest/gtest.h>

#include "grammar/grammar_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/grammar/ebnf.h"
#include "nanovllm/grammar/regex.h"
#include "nanovllm/grammar/utf8.h"
#include "support/expect_error.h"

namespace nanovllm::grammar::testing {
namespace {

using nanovllm::testing::expect_error;

std::shared_ptr<const CompiledGrammar> ebnf(std::string_view text) { return compile(parse_ebnf(text)); }
std::shared_ptr<const CompiledGrammar> regex(std::string_view pattern) {
  Grammar g;
  g.set_root(g.add_rule("root"));
  g.set_body(g.root(), parse_regex(pattern));
  return compile(g);
}

TEST(Ebnf, MatchesWhatItSays) {
  const auto g = ebnf(R"(
    # a comment
    root ::= "{" ws pair ( "," ws pair )* "}"
    pair ::= key ":" ws value
    key  ::= [a-z]+
    value ::= digits | "null" | 'q' [^"\\]? 'q'
    digits ::= [0-9]{1,3}
    ws ::= " "?
  )");
  EXPECT_TRUE(matches(g, "{a:1}"));
  EXPECT_TRUE(matches(g, "{ abc: 123, d:null}"));
  EXPECT_TRUE(matches(g, "{a:qq,b:qxq}"));
  EXPECT_FALSE(matches(g, "{a:1234}"));    // {1,3}
  EXPECT_FALSE(matches(g, "{A:1}"));       // [a-z]
  EXPECT_FALSE(matches(g, "{a:1,}"));
  EXPECT_FALSE(matches(g, "{a:1"));        // a prefix, not a match
  EXPECT_TRUE(is_prefix(g, "{a:1"));
  EXPECT_FALSE(is_prefix(g, "{a:1]"));
}

TEST(Ebnf, EscapesAndUnicode) {
  const auto g = ebnf(R"(root ::= "\x41\u00e9\n" [\u4e00-\u9fff] . "\"")");
  EXPECT_TRUE(matches(g, "A\xc3\xa9\n\xe4\xb8\xad" "x\""));        // A é \n 中 x "
  EXPECT_TRUE(matches(g, "A\xc3\xa9\n\xe4\xb8\xad\xf0\x9f\x98\x80\""));  // . is any code point (😀)
  EXPECT_FALSE(matches(g, "A\xc3\xa9\nax\""));                       // 'a' is not CJK
  EXPECT_FALSE(matches(g, "A\xc3\xa9\n\xe4\xb8" "x\""));             // a broken character
}

TEST(Ebnf, PrintedGrammarReadsBackTheSame) {
  const Grammar g = parse_ebnf(R"(root ::= ("a" | b)+ [^x-z\]] "q"{2,} "r"{0,3} b?
                                 b ::= "\n\t\"\\" | [\u0100-\U0001F600])");
  const std::string text = g.to_ebnf();
  const Grammar again = parse_ebnf(text);
  EXPECT_EQ(again.to_ebnf(), text);
  const auto a = compile(g), b = compile(again);
  for (const char* s : {"aaqq", "a\n\t\"\\]qqqrr", "bqq", "abqqq", "aq", "a]qqqqqrrrr", "\xc4\x80]qq"})
    EXPECT_EQ(matches(a, s), matches(b, s)) << s;
  EXPECT_TRUE(matches(a, "awqqqrr"));
}

TEST(Ebnf, ErrorsNameTheProblem) {
  expect_error([&] { (void)parse_ebnf("root ::= foo"); }, {"undefined rule 'foo'"});
  expect_error([&] { (void)parse_ebnf("root ::= \"a\"\nroot ::= \"b\""); }, {"defined twice"});
  expect_error([&] { (void)parse_ebnf("root ::= \"a"); }, {"unterminated literal"});
  expect_error([&] { (void)parse_ebnf("root ::= [a-"); }, {"unterminated character class"});
  expect_error([&] { (void)parse_ebnf("root ::= \"a\" )"); }, {"line 1 col 14"});
  expect_error([&] { (void)parse_ebnf("root ::= \"a\"{3,1}"); }, {"n < m"});
  expect_error([&] { (void)parse_ebnf("just text"); }, {"expected a rule"});
  expect_error([&] { (void)compile(parse_ebnf("root ::= root \"a\" | \"b\"")); }, {"left-recursive"});
  expect_error([&] { (void)compile(parse_ebnf("root ::= x\nx ::= y? x \"a\" | \"c\"\ny ::= \"b\"")); }, {"left-recursive"});
  expect_error([&] { (void)compile(parse_ebnf("root ::= \"a\" root")); }, {"matches no finite text"});
}

TEST(Ebnf, RecursionAndNullableRules) {
  const auto g = ebnf(R"(root ::= list
                         list ::= "[" (item ("," item)*)? "]"
                         item ::= list | [0-9] | empty
                         empty ::= "")");
  for (const char* s : {"[]", "[1]", "[[],[2,[3]]]", "[,]", "[1,,2]"}) EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s : {"[", "[1]]", "1", "[[1]"}) EXPECT_FALSE(matches(g, s)) << s;
}

TEST(Regex, Syntax) {
  EXPECT_TRUE(matches(regex(R"(^\d{3}-\d{4}$)"), "555-1234"));
  EXPECT_FALSE(matches(regex(R"(\d{3}-\d{4})"), "55-1234"));
  const auto r = regex(R"((?:ab|c)+[x-z]?\.\w\s\S(?<name>q)*)");
  EXPECT_TRUE(matches(r, "abcab.a \xe2\x82\xac"));  // \S: the euro sign
  EXPECT_TRUE(matches(r, "cy.Z\tkqq"));
  EXPECT_FALSE(matches(r, "cy.Z\xc2\xa0k"));        // NBSP is whitespace: not \S ... and not \s
  EXPECT_FALSE(matches(r, "a.a a"));
  const auto dot = regex("a.b");
  EXPECT_TRUE(matches(dot, "a\xe4\xb8\xad" "b"));
  EXPECT_FALSE(matches(dot, "a\nb"));
  const auto lazy = regex("a+?b{1,2}?[^a-c\\d]");
  EXPECT_TRUE(matches(lazy, "aabbz"));
  EXPECT_FALSE(matches(lazy, "aabb5"));
  EXPECT_TRUE(matches(regex("\\u00e9\\x41[\\u{1F600}-\\u{1F64F}]"), "\xc3\xa9" "A\xf0\x9f\x98\x81"));
}

TEST(Regex, UnsupportedConstructsAreErrors) {
  expect_error([&] { (void)parse_regex("(a)\\1"); }, {"backreferences"});
  expect_error([&] { (void)parse_regex("a(?=b)"); }, {"lookahead"});
  expect_error([&] { (void)parse_regex("(?<=a)b"); }, {"lookbehind"});
  expect_error([&] { (void)parse_regex("\\bword"); }, {"word boundaries"});
  expect_error([&] { (void)parse_regex("a^b"); }, {"'^' inside"});
  expect_error([&] { (void)parse_regex("(?i)abc"); }, {"inline flags"});
  expect_error([&] { (void)parse_regex("\\p{L}"); }, {"property classes"});
  expect_error([&] { (void)parse_regex("a{2,1}"); }, {"n < m"});
  expect_error([&] { (void)parse_regex("(ab"); }, {"missing ')'"});
  expect_error([&] { (void)parse_regex("*a"); }, {"nothing to repeat"});
}

TEST(Regex, JsonEscapedSpelling) {
  Grammar g;
  g.set_root(g.add_rule("root"));
  g.set_body(g.root(), json_string_escaped(parse_regex(R"(a"\\[\n\x01]\.)")));
  const auto c = compile(g);
  EXPECT_TRUE(matches(c, R"(a\"\\\n.)"));
  EXPECT_TRUE(matches(c, R"(a\"\\\u0001.)"));
  EXPECT_FALSE(matches(c, "a\"\\\n."));  // raw quote / backslash / newline are not JSON string content
}

// Every code point of a class is matched through its UTF-8 bytes, and nothing else is.
TEST(Utf8, ByteRangesCoverExactlyTheClass) {
  const CodepointRanges cls = normalize_ranges({{0x41, 0x5A}, {0x7F, 0x801}, {0xD000, 0xE100}, {0xFFF0, 0x10010},
                                                {0x10FFF0, 0x10FFFF}});
  const std::vector<ByteRangeSeq> seqs = utf8_byte_ranges(cls);
  auto covered = [&](uint32_t c) {
    std::string s;
    append_utf8(c, s);
    for (const ByteRangeSeq& q : seqs) {
      if (q.length != static_cast<int>(s.size())) continue;
      bool in = true;
      for (int i = 0; i < q.length && in; ++i) {
        const auto b = static_cast<uint8_t>(s[static_cast<size_t>(i)]);
        in = b >= q.lo[static_cast<size_t>(i)] && b <= q.hi[static_cast<size_t>(i)];
      }
      if (in) return true;
    }
    return false;
  };
  for (uint32_t c = 0; c <= kMaxCodepoint; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    bool in_class = false;
    for (const auto& [lo, hi] : cls) in_class |= c >= lo && c <= hi;
    ASSERT_EQ(covered(c), in_class) << std::hex << c;
  }
  // Surrogates are never part of a class.
  EXPECT_EQ(normalize_ranges({{0xD700, 0xE000}}), (CodepointRanges{{0xD700, 0xD7FF}, {0xE000, 0xE000}}));
}

}  // namespace
}  // namespace nanovllm::grammar::testing
