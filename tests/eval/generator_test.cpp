// The task generators: deterministic per (task, context, index, seed) whatever the thread count, prompts
// of the requested length in the model's tokens, answers in the prompt (needles at the requested depth),
// RULER's wording, and a pinned fingerprint so a change to any generator is a deliberate one.
#include <gtest/gtest.h>

#include <sstream>

#include "eval/dump.h"
#include "eval/generate.h"
#include "eval/templates.h"
#include "eval_test_util.h"
#include "nanovllm/core/error.h"
#include "support/expect_error.h"

namespace nanovllm::eval {
namespace {

using testing::builder;
using testing::byte_tokenizer;
using testing::qwen3_tokenizer;

SampleRequest request(const std::string& task, int64_t context, int64_t index = 0,
                      std::optional<double> depth = std::nullopt) {
  return {&find_task(task), context, index, depth};
}

// Haystack units are whole noise lines, needles, words or list entries: a prompt ends at most one unit
// (in tokens) below its budget. The largest unit is a uuid distractor needle, ~125 bytes.
constexpr int64_t kMaxUnitTokens = 130;

TEST(EvalGenerators, PromptsFillTheContextInModelTokens) {
  for (const Tokenizer* tok : {&byte_tokenizer(), &qwen3_tokenizer()}) {
    const SampleBuilder b = builder(*tok);
    for (const TaskConfig& task : ruler_tasks()) {
      for (int64_t context : {2048, 8192}) {
        const Sample s = b.build({&task, context, 1, std::nullopt});
        const int64_t budget = context - task.max_new_tokens;
        const auto n = static_cast<int64_t>(s.prompt_ids.size());
        EXPECT_LE(n, budget) << task.name << " " << context;
        EXPECT_GE(n, budget - kMaxUnitTokens) << task.name << " " << context;
        EXPECT_EQ(s.prompt_ids, tok->encode(s.prompt)) << task.name;  // the ids are the text's
      }
    }
  }
}

TEST(EvalGenerators, SameRequestSamePromptDifferentIndexSeedOrLengthDifferent) {
  const SampleBuilder b = builder();
  for (const TaskConfig& task : ruler_tasks()) {
    const Sample a = b.build({&task, 2048, 3, std::nullopt});
    EXPECT_EQ(a.prompt, b.build({&task, 2048, 3, std::nullopt}).prompt) << task.name;
    EXPECT_EQ(a.answers, b.build({&task, 2048, 3, std::nullopt}).answers) << task.name;
    EXPECT_NE(a.answers, b.build({&task, 2048, 4, std::nullopt}).answers) << task.name;
    EXPECT_NE(a.answers, builder(byte_tokenizer(), 43).build({&task, 2048, 3, std::nullopt}).answers) << task.name;
    EXPECT_NE(a.answers, b.build({&task, 4096, 3, std::nullopt}).answers) << task.name;
  }
}

std::string dump_all(int threads) {
  const SampleBuilder b = builder();
  std::vector<TaskConfig> tasks = ruler_tasks();
  std::ostringstream out;
  generate_samples(b, ruler_requests(tasks, {2048, 4096}, 3), threads,
                   [&](Sample&& s) { write_sample_jsonl(out, s, byte_tokenizer()); });
  return out.str();
}

TEST(EvalGenerators, DumpDoesNotDependOnThreadCount) {
  const std::string one = dump_all(1);
  EXPECT_EQ(one, dump_all(3));
  // Sample-major order: sample 0 of every context and task first.
  std::istringstream lines(one);
  std::string line;
  std::getline(lines, line);
  const auto first = nlohmann::json::parse(line);
  EXPECT_EQ(first["task"], "niah_single_1");
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["prompt_ids"].size(), first["prompt_tokens"].get<size_t>());
  EXPECT_EQ(first["target_ids"], byte_tokenizer().encode(first["target"].get<std::string>(), false));
}

// FNV-1a over every sample's prompt ids and answers: moves when any generator, the haystack, the word
// lists or the PRNG changes. Then the committed accuracy numbers (bench/) and the trained fixture's data
// no longer match the harness: update this deliberately, with them.
TEST(EvalGenerators, PinnedFingerprint) {
  const SampleBuilder b = builder();
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
  for (const TaskConfig& task : ruler_tasks()) {
    const Sample s = b.build({&task, 2048, 0, std::nullopt});
    for (int32_t id : s.prompt_ids) mix(static_cast<uint64_t>(id));
    for (const std::string& a : s.answers)
      for (char c : a) mix(static_cast<unsigned char>(c));
  }
  EXPECT_EQ(h, 0x5cf925175a880758ull) << "fingerprint 0x" << std::hex << h;
}

TEST(EvalGenerators, EveryAnswerIsInItsPromptAndTheQuestionAsksForIt) {
  const SampleBuilder b = builder();
  for (const TaskConfig& task : ruler_tasks()) {
    for (int64_t index = 0; index < 4; ++index) {
      const Sample s = b.build({&task, 4096, index, std::nullopt});
      for (const std::string& a : s.answers) EXPECT_NE(s.prompt.find(a), std::string::npos) << task.name << " " << a;
      EXPECT_FALSE(s.target.empty());
      if (task.kind != TaskKind::kNiah) continue;
      // Each value sits in its needle sentence, once, and the question names the key.
      for (const std::string& a : s.answers) {
        const std::string tail = " is: " + a + ".";
        const size_t at = s.prompt.find(tail);
        ASSERT_NE(at, std::string::npos) << task.name;
        EXPECT_EQ(s.prompt.find(tail, at + 1), std::string::npos) << task.name;
        const size_t key_at = s.prompt.rfind(" for ", at) + 5;
        const std::string key = s.prompt.substr(key_at, at - key_at);
        const std::string question = s.prompt.substr(s.prompt.rfind("\nWhat "));
        EXPECT_NE(question.find(key), std::string::npos) << key;
      }
      EXPECT_EQ(static_cast<int>(s.answers.size()), task.num_queries * task.num_values);
    }
  }
}

TEST(EvalGenerators, RulerWording) {
  const SampleBuilder b = builder();
  const Sample single = b.build(request("niah_single_2", 2048));
  EXPECT_EQ(single.prompt.rfind("A special magic number is hidden within the following text. Make sure to memorize "
                                "it. I will quiz you about the number afterwards.\n", 0), 0u);
  EXPECT_NE(single.prompt.find("\nWhat is the special magic number for "), std::string::npos);
  EXPECT_TRUE(single.prompt.ends_with(" mentioned in the provided text is"));
  EXPECT_NE(single.prompt.find("One of the special magic numbers for "), std::string::npos);  // needles stay plural

  const Sample multi = b.build(request("niah_multiquery", 2048));
  EXPECT_EQ(multi.prompt.rfind("Some special magic numbers are hidden within the following text.", 0), 0u);
  EXPECT_NE(multi.prompt.find("What are all the special magic numbers for "), std::string::npos);
  EXPECT_NE(multi.prompt.find(", and "), std::string::npos);  // "a, b, c, and d"
  EXPECT_TRUE(multi.prompt.ends_with(" mentioned in the provided text are"));

  const Sample uuid = b.build(request("niah_single_3", 2048));
  EXPECT_NE(uuid.prompt.find("A special magic uuid is hidden"), std::string::npos);
  EXPECT_EQ(uuid.answers[0].size(), 36u);
  EXPECT_EQ(uuid.answers[0][14], '4');  // version 4

  const Sample noise = b.build(request("niah_single_1", 2048));
  EXPECT_NE(noise.prompt.find(std::string(templates::kNoise) + "\n" + std::string(templates::kNoise)), std::string::npos);

  const Sample vt = b.build(request("vt", 2048));
  EXPECT_TRUE(vt.prompt.starts_with("Memorize and track the chain(s) of variable assignment hidden in the following text."));
  EXPECT_NE(vt.prompt.find(" Answer: According to the chain(s) of variable assignment in the text above, 5 variables "
                           "are assgined the value "), std::string::npos);
  EXPECT_TRUE(vt.prompt.ends_with(", they are: "));
  EXPECT_EQ(vt.answers.size(), 5u);
  EXPECT_NE(vt.prompt.find("VAR " + vt.answers[1] + " = VAR " + vt.answers[0]), std::string::npos);

  const Sample cwe = b.build(request("cwe", 8192));
  EXPECT_TRUE(cwe.prompt.starts_with("Below is a numbered list of words."));
  EXPECT_TRUE(cwe.prompt.ends_with("Answer: The top 10 words that appear most often in the list are:"));
  EXPECT_EQ(cwe.answers.size(), 10u);

  const Sample fwe = b.build(request("fwe", 2048));
  EXPECT_TRUE(fwe.prompt.starts_with("Read the following coded text and track the frequency of each coded word."));
  EXPECT_TRUE(fwe.prompt.ends_with("the three most frequently appeared words are:"));
  EXPECT_EQ(fwe.answers.size(), 3u);
}

// cwe's common words appear freq_common times, the others fewer; fwe's answers are the 2nd-4th most
// frequent words.
TEST(EvalGenerators, CountingTasksHaveTheirAnswersAsTheMostFrequent) {
  const SampleBuilder b = builder();
  auto count = [](const std::string& s, const std::string& w) {
    int n = 0;
    for (size_t at = s.find(w); at != std::string::npos; at = s.find(w, at + 1)) ++n;
    return n;
  };
  const Sample cwe = b.build(request("cwe", 16384));
  const std::string list = cwe.prompt.substr(cwe.prompt.rfind("Below is a numbered list"));  // past the example
  for (const std::string& w : cwe.answers) EXPECT_EQ(count(list + " ", ". " + w + " ") + count(list, ". " + w + "\n"), 30) << w;
  const Sample fwe = b.build(request("fwe", 8192));
  int prev = 1 << 30;
  for (const std::string& w : fwe.answers) {
    const int c = count(fwe.prompt, " " + w + " ");
    EXPECT_LT(c, prev);
    EXPECT_GT(c, 2);
    prev = c;
  }
}

double needle_depth_in_text(const Sample& s) {
  const std::string& p = s.prompt;
  const size_t begin = p.find('\n') + 1;            // the haystack starts after the first template line
  const size_t end = p.rfind("\nWhat is the special");
  const size_t at = p.find("One of the special magic");
  return static_cast<double>(at - begin) / static_cast<double>(end - begin);
}

TEST(EvalGenerators, NeedleSweepPutsTheNeedleAtTheDepth) {
  const SampleBuilder b = builder();
  for (const char* task : {"niah_single_1", "niah_single_2", "niah_single_3"}) {
    for (double depth : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      const Sample s = b.build(request(task, 16384, 0, depth));
      EXPECT_DOUBLE_EQ(s.depth, depth);
      // Sentence / line granularity: KJV sentences reach a few hundred bytes of the ~16000.
      EXPECT_NEAR(needle_depth_in_text(s), depth, 0.03) << task << " at " << depth;
    }
  }
}

TEST(EvalGenerators, DrawnDepthsAreReported) {
  const SampleBuilder b = builder();
  for (int64_t i = 0; i < 8; ++i) {
    const Sample s = b.build(request("niah_single_2", 16384, i));
    EXPECT_GE(s.depth, 0.0);
    EXPECT_LE(s.depth, 1.0);
    EXPECT_NEAR(needle_depth_in_text(s), s.depth, 0.03);
  }
}

TEST(EvalGenerators, ChatFormatWrapsTheUserTurn) {
  const PromptFormat f = chat_format(testing::qwen3_tokenizer_dir());
  EXPECT_EQ(f.name, "chat");
  EXPECT_FALSE(f.add_special_tokens);
  EXPECT_EQ(f.prefix, "<|im_start|>user\n");
  EXPECT_EQ(f.suffix, "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const SampleBuilder b(qwen3_tokenizer(), f, Corpus::builtin(), 42, 0, true);
  const Sample s = b.build(request("niah_single_2", 4096));
  EXPECT_TRUE(s.prompt.starts_with("<|im_start|>user\nA special magic number"));
  EXPECT_TRUE(s.prompt.ends_with("</think>\n\n The special magic number for " +
                                 s.prompt.substr(s.prompt.rfind(" for ") + 5)));
  EXPECT_LE(static_cast<int64_t>(s.prompt_ids.size()), 4096 - 128);
  // auto: chat when the model has a template, none for the fixture's tokenizer (it has none).
  EXPECT_EQ(resolve_format("auto", testing::qwen3_tokenizer_dir()).name, "chat");
  EXPECT_EQ(resolve_format("auto", testing::retrieval_model_dir()).name, "none");
  nanovllm::testing::expect_error([] { chat_format(testing::retrieval_model_dir()); }, {"no chat template"});
  nanovllm::testing::expect_error([] { resolve_format("jinja", testing::retrieval_model_dir()); }, {"--template"});
}

TEST(EvalGenerators, TooShortAContextIsAClearError) {
  const SampleBuilder b = builder();
  nanovllm::testing::expect_error([&] { b.build(request("vt", 512)); }, {"task vt", "context 512 is too short"});
  nanovllm::testing::expect_error([&] { b.build(request("niah_single_1", 100)); }, {"niah_single_1", "no room"});
}

TEST(EvalGenerators, MaxNewTokensOverrideIsReservedOutOfTheContext) {
  const SampleBuilder b(byte_tokenizer(), none_format(), Corpus::builtin(), 42, 16);
  const Sample s = b.build(request("niah_single_2", 2048));
  EXPECT_EQ(s.max_new_tokens, 16);
  EXPECT_LE(static_cast<int64_t>(s.prompt_ids.size()), 2048 - 16);
  EXPECT_GT(static_cast<int64_t>(s.prompt_ids.size()), 2048 - 128);
}

TEST(EvalCorpus, BuiltinKjvWordsSentencesVocabulary) {
  const Corpus& c = Corpus::builtin();
  EXPECT_GT(c.num_words(), 700000);
  EXPECT_GT(c.sentence_starts().size(), 20000u);
  EXPECT_GT(c.vocabulary().size(), 5000u);
  std::vector<size_t> offsets;
  const std::string first = c.words(0, 12, &offsets);
  EXPECT_EQ(first, "In the beginning God created the heaven and the earth. And the");
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 55}));
  // Past the end the text wraps to the first word, which starts a sentence.
  const std::string wrapped = c.words(c.num_words() - 2, 4, &offsets);
  EXPECT_EQ(wrapped, "all. Amen. In the");
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 5, 11}));
  for (const std::string& w : c.vocabulary()) {
    ASSERT_GE(w.size(), 3u);
    for (char ch : w) ASSERT_TRUE(ch >= 'a' && ch <= 'z') << w;
  }
  nanovllm::testing::expect_error([] { Corpus("too few words", "tiny"); }, {"at least 1000 words"});
}

}  // namespace
}  // namespace nanovllm::eval
