// Structured outputs through the engine (CPU backend, a random-weight model with the Qwen3 tokenizer, so
// free text is noise): every constrained answer that finishes with "stop" matches its constraint, checked
// with independent means (nlohmann's JSON parser and hand checks of the schema, std::regex); max_tokens
// inside an object is "length"; unsupported schemas are errors; the reasoning gate.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <regex>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/vocabulary.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/llm/structured_output.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "support/expect_error.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

EngineConfig cpu_config(bool async_scheduling = false) {
  EngineConfig c;
  c.model.path = testing::text_model_dir();
  c.model.backend = Backend::kCpu;
  c.cache.kv_cache_bytes = 64LL << 20;
  c.scheduler.async_scheduling = async_scheduling;
  return c;
}

SamplingParams sampled(uint64_t seed, int64_t max_tokens) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = seed;
  sp.max_tokens = max_tokens;
  return sp;
}

constexpr const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":8},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3},
  "ok":{"type":"boolean"}},
  "required":["name","age"],"additionalProperties":false})";

// The schema above, checked by hand on a parsed value.
void expect_person(const nlohmann::json& v, const std::string& text) {
  ASSERT_TRUE(v.is_object()) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  EXPECT_LE(v["name"].get<std::string>().size(), 8u * 4) << text;  // <= 8 code points
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(v["age"].get<int64_t>(), 120) << text;
  for (const auto& [k, x] : v.items()) {
    EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "ok") << k << " in " << text;
    if (k == "tags") {
      ASSERT_TRUE(x.is_array()) << text;
      EXPECT_LE(x.size(), 3u) << text;
      for (const auto& t : x) EXPECT_TRUE(t == "a" || t == "b" || t == "c") << text;
    }
    if (k == "ok") {
      EXPECT_TRUE(x.is_boolean()) << text;
    }
  }
}

TEST(StructuredOutput, JsonSchemaAnswersValidate) {
  LLM llm(cpu_config());
  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    prompts.push_back("Give me a person as JSON " + std::to_string(seed));
    SamplingParams sp = sampled(seed, 400);
    sp.structured_outputs = StructuredOutputsParams{};
    sp.structured_outputs->json = kPersonSchema;
    params.push_back(sp);
  }
  const std::vector<RequestOutput> outs = llm.generate(prompts, params);
  int stopped = 0;
  for (const RequestOutput& o : outs) {
    if (o.finish_reason != FinishReason::kStop) continue;
    ++stopped;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(o.text)) << o.text;
    expect_person(v, o.text);
  }
  EXPECT_GE(stopped, 4) << "most answers should complete within 400 tokens";
}

TEST(StructuredOutput, RegexChoiceGrammarAndJsonObject) {
  LLM llm(cpu_config(/*async_scheduling=*/true));  // constrained steps are never scheduled ahead
  struct Case {
    StructuredOutputsParams so;
    std::function<void(const std::string&)> check;
  };
  std::vector<Case> cases;
  {
    StructuredOutputsParams so;
    so.regex = R"(\d{3}-[a-z]{2,4}( [A-Z]{1,5})?)";
    cases.push_back({so, [](const std::string& t) {
                       EXPECT_TRUE(std::regex_match(t, std::regex(R"(\d{3}-[a-z]{2,4}( [A-Z]{1,5})?)"))) << t;
                     }});
  }
  {
    StructuredOutputsParams so;
    so.choice = std::vector<std::string>{"yes", "no", "maybe so"};
    cases.push_back({so, [](const std::string& t) { EXPECT_TRUE(t == "yes" || t == "no" || t == "maybe so") << t; }});
  }
  {
    StructuredOutputsParams so;
    so.grammar = R"g(root ::= "(" expr ")"
                     expr ::= num (" + " num){0,3}
                     num ::= [1-9] [0-9]?)g";
    cases.push_back({so, [](const std::string& t) {
                       EXPECT_TRUE(std::regex_match(t, std::regex(R"(\([1-9][0-9]?( \+ [1-9][0-9]?){0,3}\))"))) << t;
                     }});
  }
  {
    StructuredOutputsParams so;
    so.json_object = true;
    cases.push_back({so, [](const std::string& t) {
                       nlohmann::json v;
                       ASSERT_NO_THROW(v = nlohmann::json::parse(t)) << t;
                       EXPECT_TRUE(v.is_object()) << t;
                     }});
  }
  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      prompts.push_back("Answer " + std::to_string(i));
      SamplingParams sp = sampled(100 + seed, 300);
      sp.structured_outputs = cases[i].so;
      params.push_back(sp);
    }
  }
  // An unconstrained request in the same batch stays free.
  prompts.push_back("free");
  params.push_back(sampled(7, 20));
  params.back().ignore_eos = true;
  const std::vector<RequestOutput> outs = llm.generate(prompts, params);
  for (size_t k = 0; k + 1 < outs.size(); ++k) {
    const Case& c = cases[k / 3];
    EXPECT_NE(outs[k].finish_reason, FinishReason::kAbort) << k;
    if (c.so.json_object && outs[k].finish_reason == FinishReason::kLength) continue;  // free keys may run long
    EXPECT_EQ(outs[k].finish_reason, FinishReason::kStop) << k << ": " << outs[k].text;
    c.check(outs[k].text);
  }
  EXPECT_EQ(outs.back().token_ids.size(), 20u);
}

TEST(StructuredOutput, MaxTokensInsideAnObjectIsLength) {
  LLM llm(cpu_config());
  SamplingParams sp = sampled(3, 4);
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->json = kPersonSchema;
  const RequestOutput o = llm.generate(std::vector<std::string>{"x"}, sp)[0];
  EXPECT_EQ(o.finish_reason, FinishReason::kLength);
  EXPECT_EQ(o.token_ids.size(), 4u);
  EXPECT_EQ(o.text.substr(0, 1), "{") << o.text;
}

TEST(StructuredOutput, GreedyAndLogprobsSeeTheMask) {
  LLM llm(cpu_config());
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 10;
  sp.logprobs = 5;
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->choice = std::vector<std::string>{"alpha", "beta"};
  const RequestOutput o = llm.generate(std::vector<std::string>{"pick"}, sp)[0];
  EXPECT_TRUE(o.text == "alpha" || o.text == "beta") << o.text;
  EXPECT_EQ(o.finish_reason, FinishReason::kStop);
  // The first token's candidates are the tokens that can start a choice; the others are masked (-inf).
  const Tokenizer& tok = llm.engine().tokenizer();
  ASSERT_FALSE(o.logprobs.empty());
  for (const TokenLogprob& lp : o.logprobs[0]) {
    if (lp.logprob == -std::numeric_limits<float>::infinity()) continue;
    const std::string text(tok.token_bytes(static_cast<int32_t>(lp.id)));
    EXPECT_TRUE(std::string("alpha").starts_with(text) || std::string("beta").starts_with(text)) << text;
  }
}

TEST(StructuredOutput, BadConstraintsAreErrorsNamingThem) {
  LLM llm(cpu_config());
  SamplingParams sp = sampled(1, 8);
  sp.structured_outputs = StructuredOutputsParams{};
  sp.structured_outputs->json = R"({"type":"object","properties":{"a":{"not":{"type":"null"}}}})";
  testing::expect_error([&] { llm.generate(std::vector<std::string>{"x"}, sp); }, {"keyword 'not'", "#/properties/a"});
  sp.structured_outputs->json.reset();
  sp.structured_outputs->regex = "(a)\\1";
  testing::expect_error([&] { llm.generate(std::vector<std::string>{"x"}, sp); }, {"backreferences"});
  sp.structured_outputs->grammar = "root ::= x";
  testing::expect_error([&] { llm.generate(std::vector<std::string>{"x"}, sp); }, {"exactly one of"});
  sp.structured_outputs->regex.reset();
  testing::expect_error([&] { llm.generate(std::vector<std::string>{"x"}, sp); }, {"undefined rule 'x'"});
  // The engine keeps serving afterwards.
  SamplingParams ok = sampled(1, 3);
  ok.ignore_eos = true;
  EXPECT_EQ(llm.generate(std::vector<std::string>{"x"}, ok)[0].token_ids.size(), 3u);
}

// The reasoning gate on its own: tokens are free until </think>, then the grammar; an answer that does
// not open with <think> is constrained from its first token.
TEST(StructuredOutput, ReasoningGate) {
  LLM llm(cpu_config());
  StructuredOutputs& so = llm.engine().structured_outputs();
  const Tokenizer& tok = llm.engine().tokenizer();
  const int32_t think = *tok.token_to_id("<think>"), end = *tok.token_to_id("</think>");
  const int32_t yes = tok.encode("yes", false)[0];
  const int64_t vocab = llm.engine().model_config().vocab_size;
  std::vector<uint32_t> words(static_cast<size_t>(grammar::bitmask_words(vocab)));
  StructuredOutputsParams p;
  p.choice = std::vector<std::string>{"yes"};
  p.reasoning_start = "<think>";
  p.reasoning_end = "</think>";

  auto open = so.make_constraint(p);  // may reason: <think> or the answer
  ASSERT_TRUE(open->fill_bitmask(words.data(), vocab));
  EXPECT_TRUE(grammar::bitmask_test(words.data(), think));
  EXPECT_TRUE(grammar::bitmask_test(words.data(), yes));
  EXPECT_FALSE(grammar::bitmask_test(words.data(), end));
  ASSERT_TRUE(open->accept(think));
  EXPECT_FALSE(open->fill_bitmask(words.data(), vocab));  // reasoning: no mask
  EXPECT_TRUE(open->accept(tok.encode(" hmm", false)[0]));
  EXPECT_TRUE(open->accept(end));
  ASSERT_TRUE(open->fill_bitmask(words.data(), vocab));
  EXPECT_TRUE(grammar::bitmask_test(words.data(), yes));
  EXPECT_FALSE(grammar::bitmask_test(words.data(), think));
  EXPECT_FALSE(open->is_complete());
  EXPECT_TRUE(open->accept(yes));
  EXPECT_TRUE(open->is_complete());

  auto direct = so.make_constraint(p);  // answers at once
  EXPECT_FALSE(direct->accept(end));
  EXPECT_TRUE(direct->accept(yes));
  EXPECT_TRUE(direct->is_complete());

  p.reasoning_open = true;  // the prompt opened <think>
  auto inside = so.make_constraint(p);
  EXPECT_FALSE(inside->fill_bitmask(words.data(), vocab));
  EXPECT_TRUE(inside->accept(yes));  // still reasoning
  EXPECT_FALSE(inside->is_complete());

  p.reasoning_end = "not a token";
  testing::expect_error([&] { so.make_constraint(p); }, {"reasoning_end 'not a token'"});
}

}  // namespace
}  // namespace nanovllm
