// The text subcommands of the `nanovllm` binary: tokenize / detokenize against the HF golden ids,
// generate --prompt, chat driven through a pipe (compared with the library's greedy generation of the
// same rendered conversation), bench tokenizer, and the errors users can cause.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "support/test_models.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

using testing::run_nanovllm;
using testing::text_model_dir;
using testing::write_temp_file;

nlohmann::json golden_cases(const std::vector<std::string>& names) {
  std::ifstream f(std::filesystem::path(NANOVLLM_TEST_DATA) / "tokenizer" / "qwen3_golden.json");
  const auto all = nlohmann::json::parse(f);
  nlohmann::json picked = nlohmann::json::array();
  for (const auto& name : names)
    for (const auto& c : all["cases"])
      if (c["name"] == name) picked.push_back(c);
  EXPECT_EQ(picked.size(), names.size());
  return picked;
}

nlohmann::json parse_json(const std::string& s) {
  try {
    return nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON: " << s;
    return nullptr;
  }
}

TEST(TextCli, TokenizeDetokenizeRoundTripMatchesHfGoldens) {
  const auto cases = golden_cases({"english", "chinese", "japanese", "korean", "emoji", "emoji_zwj", "emoji_flags",
                                   "combining_nfc", "whitespace", "special_tokens", "special_inline", "random_5"});
  nlohmann::json texts = nlohmann::json::array(), ids = nlohmann::json::array();
  for (const auto& c : cases) {
    texts.push_back(c["text"]);
    ids.push_back(c["ids"]);
  }
  const std::string model = text_model_dir().string();
  const auto in = write_temp_file("texts.json", texts.dump());
  for (const std::string flag : {"", " --no-special"}) {  // Qwen's post-processor adds nothing either way
    const auto r = run_nanovllm("tokenize --model " + model + " --input-json " + in.string() + flag);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse_json(r.out), ids) << flag;
  }

  const auto ids_file = write_temp_file("ids.json", ids.dump());
  auto r = run_nanovllm("detokenize --model " + model + " --input-json " + ids_file.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto decoded = parse_json(r.out);
  r = run_nanovllm("detokenize --model " + model + " --input-json " + ids_file.string() + " --skip-special-tokens");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto decoded_skip = parse_json(r.out);
  ASSERT_EQ(decoded.size(), cases.size());
  ASSERT_EQ(decoded_skip.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(decoded[i], cases[i]["decoded"]) << cases[i]["name"];
    EXPECT_EQ(decoded_skip[i], cases[i]["decoded_skip"]) << cases[i]["name"];
  }

  // --ids, repeated, in order.
  std::string args = "detokenize --model " + model;
  for (size_t i : {1u, 4u}) {
    std::string list;
    for (const auto& id : cases[i]["ids"]) list += (list.empty() ? "" : ",") + std::to_string(id.get<int>());
    args += " --ids " + list;
  }
  r = run_nanovllm(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(parse_json(r.out), nlohmann::json({cases[1]["decoded"], cases[4]["decoded"]}));
}

TEST(TextCli, GenerateTextPrompts) {
  const auto dir = text_model_dir();
  const Tokenizer tok = Tokenizer::from_model_dir(dir);
  const std::string prompt = "中文和English混合 😀";
  const auto r = run_nanovllm("generate --backend cpu --model " + dir.string() + " --prompt '" + prompt +
                              "' --prompt-ids 9707,11 --prompt 'def f():' --temperature 0 --max-tokens 9"
                              " --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> objs;
  for (std::string line; std::getline(lines, line);) objs.push_back(parse_json(line));
  ASSERT_EQ(objs.size(), 3u) << r.out;
  // Command-line order: text, ids, text.
  EXPECT_EQ(objs[0]["prompt_tokens"], tok.encode(prompt).size());
  EXPECT_EQ(objs[1]["prompt_tokens"], 2);
  EXPECT_EQ(objs[2]["prompt_tokens"], tok.encode("def f():").size());
  for (const auto& o : objs) {
    const auto ids = o["token_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids.size(), 9u);
    EXPECT_EQ(o["text"], tok.decode(ids, true));
  }
  // Without --json the text itself is printed.
  const auto plain = run_nanovllm("generate --backend cpu --model " + dir.string() + " --prompt '" + prompt +
                                  "' --temperature 0 --max-tokens 9 --ignore-eos");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find(objs[0]["text"].get<std::string>()), std::string::npos) << plain.out;
}

TEST(TextCli, ChatStreamsRepliesAndKeepsHistory) {
  const auto dir = text_model_dir();
  const auto r = run_nanovllm("chat --backend cpu --model " + dir.string() + " --temperature 0 --max-tokens 7",
                              "Hello there!\n/think off\nWhat is 2+2? 答えて\n\n/reset\n/bogus\nhi 👋\n/exit\nnot read\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("[thinking off]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[history cleared]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown command"), std::string::npos) << r.err;

  // Reference: the library's greedy generation of each rendered conversation.
  LLMEngine probe({.model = {.path = dir, .backend = Backend::kCpu}});
  const chat::ChatTemplate& tmpl = probe.chat_template();
  LLM llm({.model = {.path = dir, .backend = Backend::kCpu}});
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 7;
  auto reply = [&](const nlohmann::ordered_json& messages, std::optional<bool> thinking) {
    chat::ChatTemplateOptions o;
    o.enable_thinking = thinking;
    const auto ids = llm.encode(tmpl.render(messages, o), false);
    return llm.decode(llm.generate({ids}, p)[0].token_ids);
  };
  using oj = nlohmann::ordered_json;
  oj conv = oj::array({oj{{"role", "user"}, {"content", "Hello there!"}}});
  const std::string r1 = reply(conv, std::nullopt);
  conv.push_back(oj{{"role", "assistant"}, {"content", r1}});
  conv.push_back(oj{{"role", "user"}, {"content", "What is 2+2? 答えて"}});
  const std::string r2 = reply(conv, false);
  const std::string r3 = reply(oj::array({oj{{"role", "user"}, {"content", "hi 👋"}}}), false);
  EXPECT_EQ(r.out, r1 + "\n" + r2 + "\n" + r3 + "\n");
  EXPECT_NE(r1, r2);  // the history and the /think switch reached the model

  // EOF ends the session like /exit.
  const auto eof = run_nanovllm("chat --backend cpu --model " + dir.string() + " --temperature 0 --max-tokens 7",
                                "Hello there!");
  ASSERT_EQ(eof.exit_code, 0) << eof.err;
  EXPECT_EQ(eof.out, r1 + "\n");
}

TEST(TextCli, BenchTokenizer) {
  std::string corpus;
  for (int i = 0; i < 3000; ++i) corpus += "Hello world, 你好世界 😀\n";
  const auto file = write_temp_file("corpus.txt", corpus);
  const Tokenizer tok = Tokenizer::from_model_dir(testing::qwen3_tokenizer_dir());
  const auto per_line = tok.encode("Hello world, 你好世界 😀\n").size();
  auto r = run_nanovllm("bench tokenizer --tokenizer " + (testing::qwen3_tokenizer_dir() / "tokenizer.json").string() +
                        " --corpus " + file.string() + " --passes 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = parse_json(r.out);
  EXPECT_EQ(j["bytes"], corpus.size());
  EXPECT_EQ(j["tokens"], 3000 * per_line);  // chunks are cut at line ends
  EXPECT_GT(j["mb_per_s"].get<double>(), 0);
  // The default corpus (tests/data/tokenizer/corpus.json's cases, repeated).
  r = run_nanovllm("bench tokenizer --model " + text_model_dir().string() + " --corpus-mb 0.3 --passes 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("MB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
}

void expect_user_error(const std::string& args, const std::string& needle, const std::string& stdin_text = "") {
  const auto r = run_nanovllm(args, stdin_text);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find("error: "), std::string::npos) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
}

// Issue 45 (items 8, 9): user numbers keep their values. detokenize printed id 2^64 - 1 as -1; --max-tokens
// near 2^63 overflowed the cap check of generate, which then said nothing; lengths past 2^24 are refused.
TEST(TextCli, HugeNumbersKeepTheirValues) {
  const std::string model = text_model_dir().string();
  expect_user_error("detokenize --model " + model + " --input-json " +
                        write_temp_file("huge.json", "[[5, 18446744073709551615]]").string(),
                    "token id 18446744073709551615 is outside");
  const auto r = run_nanovllm("generate --backend cpu --model " + model +
                              " --max-model-len 24 --prompt hi --max-tokens 9223372036854775807");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--max-tokens 9223372036854775807 is capped at"), std::string::npos) << r.err;
  expect_user_error("bench serve --model " + model + " --input-len 99999999999", "--input-len");
}

TEST(TextCli, BadInputsExitOneWithAnError) {
  const std::string model = text_model_dir().string();
  const std::string no_tok = testing::tiny_model_dir("text-cli-no-tokenizer", nlohmann::json::object(), 4).string();
  const auto texts = write_temp_file("ok.json", R"(["a"])");
  // No tokenizer.json.
  expect_user_error("tokenize --model " + no_tok + " --input-json " + texts.string(), "tokenizer.json");
  expect_user_error("detokenize --model " + no_tok + " --ids 1,2", "tokenizer.json");
  expect_user_error("generate --backend cpu --model " + no_tok + " --prompt hi", "tokenizer.json");
  expect_user_error("chat --backend cpu --model " + no_tok, "tokenizer.json", "hi\n");
  // Invalid / wrong-shaped JSON files, missing file.
  const auto bad = write_temp_file("bad.json", "[\"unterminated");
  expect_user_error("tokenize --model " + model + " --input-json " + bad.string(), "not valid JSON");
  expect_user_error("detokenize --model " + model + " --input-json " + bad.string(), "not valid JSON");
  expect_user_error("tokenize --model " + model + " --input-json " + write_temp_file("n.json", "[1]").string(),
                    "not a string");
  expect_user_error("detokenize --model " + model + " --input-json " + write_temp_file("s.json", "[[1, \"x\"]]").string(),
                    "non-integer");
  expect_user_error("tokenize --model " + model + " --input-json /nonexistent/x.json", "/nonexistent/x.json");
  // Invalid UTF-8: in --prompt and inside a JSON file (raw bytes are rejected by the JSON parser).
  expect_user_error("generate --backend cpu --model " + model + " --prompt ok --prompt \"$(printf 'a\\377b')\"",
                    "UTF-8");
  expect_user_error("tokenize --model " + model + " --text \"$(printf '\\300\\200')\"", "UTF-8");
  expect_user_error("tokenize --model " + model + " --input-json " +
                        write_temp_file("u.json", std::string("[\"a\xff\"]")).string(), "not valid JSON");
  // Ids outside the tokenizer's vocabulary, negative, malformed.
  expect_user_error("detokenize --model " + model + " --ids 1,151669", "151669");
  expect_user_error("detokenize --model " + model + " --input-json " + write_temp_file("neg.json", "[[5, -1]]").string(),
                    "-1");
  expect_user_error("detokenize --model " + model + " --ids 1,x", "--ids");
  // Nothing to do.
  expect_user_error("generate --backend cpu --model " + model, "--prompt");
  expect_user_error("tokenize --model " + model, "--input-json");
  // make-test-model --tokenizer with a vocab too small for the tokenizer / a directory without one.
  expect_user_error("make-test-model --out " + testing::write_temp_file("x", "").string() + "-m --tokenizer " +
                        testing::qwen3_tokenizer_dir().string(), "vocab_size");
  expect_user_error("make-test-model --out /tmp/nanovllm-text-io-unused --tokenizer " + no_tok, "tokenizer.json");
  // A bad chat turn is reported and the session goes on.
  const auto r = run_nanovllm("chat --backend cpu --model " + model + " --temperature 0 --max-tokens 3",
                              std::string("bad \xff\n") + "good\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("UTF-8"), std::string::npos) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace
}  // namespace nanovllm
