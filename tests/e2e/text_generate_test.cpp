// Text in, text out through the library: LLM::generate(strings), RequestOutput::text, tokenizer EOS in
// the stop set, the per-step delta callback (streaming), and the errors of the text path.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "support/expect_error.h"
#include "support/process_scratch_dir.h"
#include "support/test_models.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

EngineConfig cpu_config(const std::filesystem::path& model) {
  EngineConfig c;
  c.model.path = model;
  c.model.backend = Backend::kCpu;
  c.cache.kv_cache_bytes = 64LL << 20;
  return c;
}

using testing::greedy;

// A private copy of a model directory whose weights are symlinked (the configs can then be edited).
std::filesystem::path light_copy(const std::filesystem::path& src, const std::string& name) {
  static const testing::ProcessScratchDir root("nanovllm-light-copy");
  const auto dst = root.path() / name;
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    if (e.path().extension() == ".safetensors")
      std::filesystem::create_symlink(std::filesystem::absolute(e.path()), dst / e.path().filename());
    else
      std::filesystem::copy_file(e.path(), dst / e.path().filename());
  }
  return dst;
}

const std::vector<std::string> kPrompts = {"Hello, my name is", "我们今天去公园散步，", "Emoji 😀🎉 and ZWJ 👨‍👩‍👧",
                                           "def fib(n):\n    return"};

TEST(TextGenerate, TextIsTheDecodedTokensAndPromptsAreTokenized) {
  const auto dir = testing::text_model_dir();
  const Tokenizer ref = Tokenizer::from_model_dir(dir);  // an independent instance
  LLM llm(cpu_config(dir));
  const auto outs = llm.generate(kPrompts, greedy(17));
  ASSERT_EQ(outs.size(), kPrompts.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(outs[i].prompt_token_ids, ref.encode(kPrompts[i])) << i;
    ASSERT_EQ(outs[i].token_ids.size(), 17u) << i;
    EXPECT_EQ(outs[i].text, ref.decode(outs[i].token_ids, /*skip_special_tokens=*/true)) << i;
    EXPECT_FALSE(outs[i].text.empty()) << i;
  }
  // The same prompts as ids give the same greedy tokens.
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : kPrompts) ids.push_back(ref.encode(p));
  const auto by_ids = llm.generate(ids, greedy(17));
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(by_ids[i].token_ids, outs[i].token_ids) << i;
    EXPECT_TRUE(by_ids[i].text.empty()) << "the id API does not decode";
  }
  // Braced lists pick the right overload.
  const auto one_text = llm.generate({"Hello, my name is"}, greedy(17));
  EXPECT_EQ(one_text[0].token_ids, outs[0].token_ids);
  const auto one_ids = llm.generate({{9707, 11, 847, 829, 374}}, greedy(3));
  EXPECT_EQ(one_ids[0].prompt_token_ids, (std::vector<int32_t>{9707, 11, 847, 829, 374}));
  EXPECT_EQ(llm.decode(outs[2].token_ids), outs[2].text);
  EXPECT_EQ(llm.encode("我们"), ref.encode("我们"));
}

TEST(TextGenerate, TokenizerEosJoinsTheStopSet) {
  const auto dir = testing::text_model_dir();
  const Tokenizer ref = Tokenizer::from_model_dir(dir);
  ASSERT_TRUE(ref.eos_token_id().has_value());
  // generation_config.json says eos 7 only; tokenizer_config.json's <|im_end|> is added, once.
  const auto copy = light_copy(dir, "eos-model");
  {
    std::ofstream(copy / "generation_config.json") << R"({"bos_token_id": 1, "eos_token_id": 7})";
  }
  LLMEngine engine(cpu_config(copy));
  EXPECT_EQ(engine.model_config().eos_token_ids, (std::vector<int64_t>{7, *ref.eos_token_id()}));
  {
    std::ofstream(copy / "generation_config.json") << R"({"eos_token_id": [151645, 7]})";
  }
  LLMEngine engine2(cpu_config(copy));
  EXPECT_EQ(engine2.model_config().eos_token_ids, (std::vector<int64_t>{151645, 7}));

  // The stop set is enforced: a request whose greedy path meets that id stops there with "stop".
  LLM llm(cpu_config(dir));
  auto free_run = llm.generate({"Hello"}, greedy(12))[0].token_ids;
  ASSERT_GE(free_run.size(), 4u);
  // Make the 4th greedy token the EOS by writing a tokenizer_config.json whose eos_token is that token.
  const auto copy2 = light_copy(dir, "eos-model-2");
  const auto name = ref.id_to_token(free_run[3]);
  ASSERT_TRUE(name.has_value());
  {
    nlohmann::json cfg = {{"eos_token", *name}};
    std::ofstream(copy2 / "tokenizer_config.json") << cfg.dump();
  }
  LLM llm2(cpu_config(copy2));
  SamplingParams p = greedy(12);
  p.ignore_eos = false;
  const auto stopped = llm2.generate({"Hello"}, p)[0];
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_EQ(stopped.token_ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  std::filesystem::remove_all(copy);
  std::filesystem::remove_all(copy2);
}

TEST(TextGenerate, DeltasConcatenateToTheOutputs) {
  LLMEngine engine(cpu_config(testing::text_model_dir()));
  const Tokenizer& tok = engine.tokenizer();
  std::map<int64_t, std::vector<int32_t>> streamed;
  std::map<int64_t, std::vector<std::vector<TokenLogprob>>> streamed_lp;
  std::map<int64_t, int> finished_deltas;
  std::map<int64_t, FinishReason> streamed_reason;
  std::map<int64_t, std::string> streamed_text;
  std::map<int64_t, std::unique_ptr<IncrementalDetokenizer>> detok;
  engine.set_delta_callback([&](const RequestDelta& d) {
    EXPECT_EQ(finished_deltas[d.request_id], 0) << "delta after the finished one for " << d.request_id;
    streamed[d.request_id].insert(streamed[d.request_id].end(), d.new_token_ids.begin(), d.new_token_ids.end());
    for (const auto& lp : d.logprobs) streamed_lp[d.request_id].push_back(lp);
    auto& dt = detok[d.request_id];
    if (!dt) dt = std::make_unique<IncrementalDetokenizer>(tok, true);
    streamed_text[d.request_id] += dt->add(d.new_token_ids);
    if (d.finished) {
      ++finished_deltas[d.request_id];
      streamed_reason[d.request_id] = d.finish_reason;
      streamed_text[d.request_id] += dt->finish();
    }
  });
  // Odd lengths, one with logprobs, a long prompt that prefills in chunks alongside decodes.
  std::vector<int64_t> ids;
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SamplingParams p = greedy(5 + 3 * static_cast<int64_t>(i));
    if (i == 1) p.logprobs = 3;
    if (i == 2) p.temperature = 0.8f, p.seed = 99;
    params.push_back(p);
    ids.push_back(engine.add_request(tok.encode(kPrompts[i]), p));
  }
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "The quick brown fox jumps over the lazy dog. ";
  ids.push_back(engine.add_request(tok.encode(long_prompt), greedy(6)));
  std::map<int64_t, RequestOutput> outs;
  while (engine.has_unfinished())
    for (RequestOutput& o : engine.step()) outs.emplace(o.request_id, std::move(o));
  ASSERT_EQ(outs.size(), ids.size());
  for (int64_t id : ids) {
    const RequestOutput& o = outs.at(id);
    EXPECT_EQ(streamed[id], o.token_ids) << id;
    EXPECT_EQ(finished_deltas[id], 1) << id;
    EXPECT_EQ(streamed_reason[id], o.finish_reason) << id;
    EXPECT_EQ(streamed_text[id], tok.decode(o.token_ids, true)) << id;
    ASSERT_EQ(streamed_lp[id].size(), o.logprobs.size()) << id;
    for (size_t k = 0; k < o.logprobs.size(); ++k) {
      ASSERT_EQ(streamed_lp[id][k].size(), o.logprobs[k].size());
      for (size_t m = 0; m < o.logprobs[k].size(); ++m) {
        EXPECT_EQ(streamed_lp[id][k][m].id, o.logprobs[k][m].id);
        EXPECT_EQ(streamed_lp[id][k][m].logprob, o.logprobs[k][m].logprob);
      }
    }
  }
  EXPECT_EQ(streamed_lp[ids[1]].size(), 8u);

  // An aborted request gets one finished delta (kAbort, no tokens) from the next step.
  streamed.clear();
  finished_deltas.clear();
  const int64_t a = engine.add_request(tok.encode("abort me"), greedy(50));
  const int64_t b = engine.add_request(tok.encode("keep me"), greedy(3));
  engine.step();
  engine.step();
  const size_t before = streamed[a].size();
  EXPECT_GE(before, 1u);
  engine.abort_request(a);
  while (engine.has_unfinished()) engine.step();
  EXPECT_EQ(finished_deltas[a], 1);
  EXPECT_EQ(streamed_reason[a], FinishReason::kAbort);
  EXPECT_EQ(streamed[a].size(), before);
  EXPECT_EQ(finished_deltas[b], 1);
  EXPECT_EQ(streamed[b].size(), 3u);
}

TEST(TextGenerate, TextErrors) {
  // No tokenizer.json: the text API says so; the id API still works.
  LLM plain(cpu_config(testing::tiny_model_dir("text-no-tokenizer", nlohmann::json::object(), 5)));
  try {
    plain.generate(std::vector<std::string>{"hi"}, greedy(2));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(plain.generate({{1, 2, 3}}, greedy(2))[0].token_ids.size(), 2u);

  // Invalid UTF-8 in the second prompt: nothing runs, the error names the prompt.
  LLM llm(cpu_config(testing::text_model_dir()));
  try {
    llm.generate(std::vector<std::string>{"fine", std::string("bad \xff\xfe bytes")}, greedy(2));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(llm.engine().has_unfinished());
  EXPECT_EQ(llm.engine().num_generated_tokens(), 0);
  // An empty text prompt is an empty prompt.
  EXPECT_THROW(llm.generate(std::vector<std::string>{""}, greedy(2)), Error);
}

TEST(TextGenerate, TokenizerIdsOutsideTheModelVocabularyAreErrors) {
  // The Qwen3 tokenizer (ids up to 151668) next to a model of 1000 ids: its ids would index past the
  // embedding. The old loader took the eos id 151645 and the tokenizer as they were.
  const auto model = testing::tiny_model_dir("text-small-vocab", {{"vocab_size", 1000}}, 5);
  const auto copy = light_copy(model, "small-vocab");
  std::filesystem::copy_file(testing::qwen3_tokenizer_dir() / "tokenizer.json", copy / "tokenizer.json");
  std::filesystem::copy_file(testing::qwen3_tokenizer_dir() / "tokenizer_config.json",
                             copy / "tokenizer_config.json");
  testing::expect_error([&] { LLMEngine engine(cpu_config(copy)); },
                        {"tokenizer_config.json", "added_tokens_decoder['151645']", "<|im_end|>", "[0, 1000)",
                         "vocab_size"});
  // Without the eos_token shortcut the tokenizer itself is checked when text first needs it.
  std::ofstream(copy / "tokenizer_config.json") << "{}";
  LLM llm(cpu_config(copy));
  testing::expect_error([&] { llm.generate(std::vector<std::string>{"hi"}, greedy(2)); },
                        {"tokenizer.json", "model.vocab", "[0, 1000)", "vocab_size"});
  EXPECT_EQ(llm.generate({{1, 2, 3}}, greedy(2))[0].token_ids.size(), 2u);  // ids still work
  std::filesystem::remove_all(copy);
}

TEST(TextGenerate, Glm4OriginalRepoTokenizerIsNamed) {
  // THUDM's original GLM-4 layout ships tokenizer.model (tiktoken) + tokenization_chatglm.py, no tokenizer.json:
  // token ids work; text names what is missing and where to get it.
  const auto copy = light_copy(testing::golden_model_dir("glm4_chatglm_layout"), "glm4-tiktoken");
  std::ofstream(copy / "tokenizer.model") << "IQ== 0\n";
  LLM llm(cpu_config(copy));
  EXPECT_EQ(llm.generate({{1, 2, 3}}, greedy(2))[0].token_ids.size(), 2u);
  testing::expect_error([&] { llm.generate(std::vector<std::string>{"hi"}, greedy(2)); },
                        {"no tokenizer.json", "tokenization_chatglm.py", "-hf"});
  std::filesystem::remove_all(copy);
}

}  // namespace
}  // namespace nanovllm
