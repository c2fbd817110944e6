// Token masks: the fast mask (per-position accepted sets + uncertain tokens checked on the real stacks)
// equals the brute-force mask (every token tried) along random walks, on a synthetic vocabulary and on
// Qwen3's 151K-token vocabulary; stop tokens, completion and rollback.
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_test_util.h"
#include "nanovllm/grammar/ebnf.h"
#include "nanovllm/grammar/json_schema.h"
#include "nanovllm/grammar/regex.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::grammar::testing {
namespace {

// Random tokens over JSON-ish bytes (and a few multi-byte characters), so walks cross rule ends often.
std::vector<std::string> random_tokens(size_t n, uint32_t seed) {
  static const std::vector<std::string> pieces = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "  ", "0", "1",
                                                  "7", "-", ".", "e", "a", "b", "x", "true", "false", "null",
                                                  "\\", "n", "u", "\xc3\xa9", "\xe4\xb8\xad", "\xe4", "\xb8"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string t;
    const size_t len = 1 + rng() % 4;
    for (size_t k = 0; k < len; ++k) t += pieces[rng() % pieces.size()];
    out.push_back(t);
  }
  return out;
}

// Walks `steps` random allowed tokens, checking the mask at each step; returns the text produced.
std::string check_walk(const std::shared_ptr<const CompiledGrammar>& g, int steps, uint32_t seed) {
  GrammarMatcher m(g);
  std::mt19937 rng(seed);
  std::string text;
  for (int step = 0; step < steps && !m.is_completed(); ++step) {
    const std::vector<uint32_t> expected = brute_force_mask(m);
    const std::vector<uint32_t> got = fast_mask(m);
    for (int64_t id = 0; id < g->vocab().vocab_size(); ++id) {
      EXPECT_EQ(bitmask_test(got.data(), id), bitmask_test(expected.data(), id))
          << "token " << id << " at step " << step << " after '" << text << "'";
    }
    if (::testing::Test::HasFailure()) break;
    std::vector<int32_t> allowed;
    for (int64_t id = 0; id < g->vocab().vocab_size(); ++id)
      if (bitmask_test(got.data(), id)) allowed.push_back(static_cast<int32_t>(id));
    EXPECT_FALSE(allowed.empty()) << "an empty mask before completion, after '" << text << "'";
    if (allowed.empty()) break;
    // Prefer multi-byte tokens: they exercise the uncertain path.
    int32_t pick = allowed[rng() % allowed.size()];
    for (int tries = 0; tries < 3 && pick < 256; ++tries) pick = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept_token(pick));
    if (!g->vocab().is_stop(pick)) text += g->vocab().bytes(pick);
  }
  return text;
}

std::shared_ptr<const CompiledGrammar> schema_grammar(const char* schema, std::shared_ptr<const TokenVocabulary> v) {
  return compile(json_schema_grammar(std::string_view(schema)), std::move(v));
}

TEST(TokenMask, EqualsBruteForceOnSyntheticVocabulary) {
  const auto vocab = byte_vocabulary(random_tokens(3000, 7));
  const std::vector<std::shared_ptr<const CompiledGrammar>> grammars = {
      schema_grammar(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"integer"}},
                        "c":{"anyOf":[{"type":"null"},{"type":"number","minimum":-5,"maximum":100}]}},"required":["b"]})",
                     vocab),
      compile(json_value_grammar(), vocab),
      compile(parse_ebnf(R"(root ::= item (", " item)* item ::= "[" root? "]" | [0-9a-e]+ | "\"" [^"]* "\"")"), vocab),
  };
  uint32_t seed = 1;
  for (const auto& g : grammars)
    for (int walk = 0; walk < 6; ++walk) check_walk(g, 40, seed++);
}

TEST(TokenMask, StopTokensOnlyWhereTheMatchMayEnd) {
  const auto vocab = byte_vocabulary({"ab"});
  Grammar g;
  g.set_root(g.add_rule("root"));
  g.set_body(g.root(), parse_regex("a(b)?"));
  const auto c = compile(g, vocab);
  const int32_t stop = vocab->stop_ids()[0];
  GrammarMatcher m(c);
  std::vector<uint32_t> mask = fast_mask(m);
  EXPECT_FALSE(bitmask_test(mask.data(), stop));
  EXPECT_TRUE(bitmask_test(mask.data(), 'a'));
  EXPECT_TRUE(bitmask_test(mask.data(), 256));  // "ab"
  EXPECT_FALSE(bitmask_test(mask.data(), 'b'));
  EXPECT_FALSE(m.accept_token(stop));
  ASSERT_TRUE(m.accept_token('a'));
  EXPECT_TRUE(m.can_terminate());
  EXPECT_FALSE(m.is_completed());  // "b" may still come
  mask = fast_mask(m);
  EXPECT_TRUE(bitmask_test(mask.data(), stop));
  EXPECT_TRUE(bitmask_test(mask.data(), 'b'));
  ASSERT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.is_completed());  // nothing may follow: the engine stops here
  m.rollback(2);
  ASSERT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_completed());
  ASSERT_TRUE(m.accept_token(stop));
  EXPECT_TRUE(m.is_terminated());
  mask = fast_mask(m);
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);  // nothing after the stop token
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.num_tokens(), 1u);
  // Ids past the vocabulary's tokens (the model's padding) are never allowed.
  EXPECT_FALSE(m.accept_token(static_cast<int32_t>(vocab->vocab_size() - 1)));
}

TEST(TokenMask, RejectedTokenLeavesTheMatcherUnchanged) {
  const auto vocab = byte_vocabulary({"{\"", "\"}"});
  const auto c = schema_grammar(R"({"type":"object","properties":{"k":{"type":"string"}},"required":["k"]})", vocab);
  GrammarMatcher m(c);
  EXPECT_FALSE(m.accept_token('['));
  EXPECT_TRUE(m.accept_token(256));  // {"
  EXPECT_FALSE(m.accept_token('x'));
  EXPECT_FALSE(m.accept_bytes("k\":1"));  // all or nothing
  EXPECT_TRUE(m.accept_bytes("k\":\"v"));
  EXPECT_TRUE(m.accept_token(257));  // "}
  EXPECT_TRUE(m.is_completed());
}

// The real vocabulary: 151K tokens, Qwen3's special tokens excluded, <|im_end|> as the stop token.
std::shared_ptr<const TokenVocabulary> qwen3_vocabulary() {
  const Tokenizer tok = Tokenizer::from_model_dir(std::string(NANOVLLM_TEST_DATA) + "/qwen3-tokenizer");
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  std::vector<int32_t> excluded;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_special(id)) {
      excluded.push_back(id);
    } else {
      bytes[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
    }
  }
  const int32_t im_end = *tok.token_to_id("<|im_end|>");
  return std::make_shared<const TokenVocabulary>(std::move(bytes), excluded, std::vector<int32_t>{im_end}, 151936);
}

TEST(TokenMask, EqualsBruteForceOnQwen3Vocabulary) {
  const auto vocab = qwen3_vocabulary();
  ASSERT_GT(vocab->sorted().size(), 150000u);
  const auto g = schema_grammar(R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
      "tags":{"type":"array","items":{"enum":["x","y z"]},"maxItems":3},"n":{"type":"integer"}},"required":["name","n"]})",
                                vocab);
  check_walk(g, 12, 11);
  check_walk(g, 12, 12);
}

}  // namespace
}  // namespace nanovllm::grammar::testing
