// ChatTemplate API behaviour not covered by the jinja2 goldens: loading from tokenizer_config.json,
// error positions, strftime_now, the generation tag, recursion limits, and never crashing on garbage.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(NANOVLLM_TEST_DATA) + "/chat/";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("nanovllm_chat_test_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

TEST(ChatTemplate, FromTokenizerConfigQwen3) {
  const auto t = ChatTemplate::from_tokenizer_config(kDir + "qwen3_tokenizer_config.json");
  EXPECT_EQ(t.eos_token(), "<|im_end|>");
  EXPECT_EQ(t.bos_token(), "");  // null in the config
  const nlohmann::ordered_json messages = {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Hi"}}};
  ChatTemplateOptions opt;
  opt.enable_thinking = false;
  // Expected text written out by hand from the Qwen3 template.
  EXPECT_EQ(t.render(messages, opt),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "<think>\n\n</think>\n\n");
  opt.enable_thinking.reset();
  opt.add_generation_prompt = false;
  EXPECT_EQ(t.render(messages, opt), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, FromSharedQwen3Asset) {
  const fs::path asset = "/work/shared/assets/qwen3-tokenizer/tokenizer_config.json";
  if (!fs::exists(asset)) GTEST_SKIP() << "no " << asset;
  const auto t = ChatTemplate::from_tokenizer_config(asset);
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "2+2?"}}};
  EXPECT_EQ(t.render(messages), "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, FromTokenizerConfigListFormAndAddedTokens) {
  const fs::path d = temp_dir("list");
  write(d / "tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "chat_template": [{"name": "tool_use", "template": "TOOLS"},
                      {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}"}]
  })");
  const auto t = ChatTemplate::from_tokenizer_config(d / "tokenizer_config.json");
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.render(nlohmann::ordered_json::parse(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])")),
            "<s>[a][b]</s>");
  fs::remove_all(d);
}

TEST(ChatTemplate, FromTokenizerConfigSiblingJinjaAndMissing) {
  const fs::path d = temp_dir("sibling");
  write(d / "tokenizer_config.json", R"({"eos_token": "<e>"})");
  EXPECT_NE(error_of([&] { ChatTemplate::from_tokenizer_config(d / "tokenizer_config.json"); }).find("chat_template"),
            std::string::npos);
  write(d / "chat_template.jinja", "{{ messages | length }}{{ eos_token }}\n");
  const auto t = ChatTemplate::from_tokenizer_config(d / "tokenizer_config.json");
  EXPECT_EQ(t.render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "x"}}})), "1<e>");
  EXPECT_NE(error_of([&] { ChatTemplate::from_tokenizer_config(d / "nope.json"); }).find("nope.json"), std::string::npos);
  write(d / "bad.json", "{not json");
  EXPECT_NE(error_of([&] { ChatTemplate::from_tokenizer_config(d / "bad.json"); }).find("invalid JSON"), std::string::npos);
  fs::remove_all(d);
}

TEST(ChatTemplate, SyntaxErrorsNamePosition) {
  const std::string e1 = error_of([] { ChatTemplate("line one\n{% if x %}\n  {{ x | no_such }}\n{% endif %}"); });
  EXPECT_NE(e1.find("no filter named 'no_such'"), std::string::npos) << e1;
  EXPECT_NE(e1.find("line 3"), std::string::npos) << e1;
  const std::string e2 = error_of([] { ChatTemplate("ok {% include 'x.jinja' %}"); });
  EXPECT_NE(e2.find("unsupported construct '{% include %}'"), std::string::npos) << e2;
  EXPECT_NE(e2.find("line 1, column 7"), std::string::npos) << e2;
  const std::string e3 = error_of([] { ChatTemplate("{% for x in y %}{{ x }}"); });
  EXPECT_NE(e3.find("expected 'else'"), std::string::npos) << e3;  // first of {else, endfor}
  const std::string e4 = error_of([] { ChatTemplate("{{ a[1, 2] }}"); });
  EXPECT_NE(e4.find("tuple subscript"), std::string::npos) << e4;
  const std::string e5 = error_of([] { ChatTemplate("{% raw %}x{% endraw %}"); });
  EXPECT_NE(e5.find("'{% raw %}'"), std::string::npos) << e5;
}

TEST(ChatTemplate, RenderErrorsNamePositionAndRaise) {
  const ChatTemplate t("{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}");
  const nlohmann::ordered_json msgs = {{{"role", "user"}, {"content", "x"}}};
  const std::string e = error_of([&] { t.render(msgs); });
  EXPECT_NE(e.find("can only concatenate str"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;

  const ChatTemplate r("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user, got ' + messages[0].role) }}{% endif %}ok");
  EXPECT_EQ(r.render(msgs), "ok");
  const std::string er = error_of([&] { r.render(nlohmann::ordered_json{{{"role", "bot"}, {"content", ""}}}); });
  EXPECT_NE(er.find("raised an exception: first must be user, got bot"), std::string::npos) << er;

  EXPECT_NE(error_of([&] { t.render(nlohmann::ordered_json::object()); }).find("must be a JSON array"), std::string::npos);
}

TEST(ChatTemplate, StrftimeNow) {
  const ChatTemplate t("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y') | int > 2000 }}");
  char before[64], after[64];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(before, sizeof(before), "%d %b %Y", &tm);
  const std::string out = t.render(nlohmann::ordered_json::array());
  now = std::time(nullptr);
  localtime_r(&now, &tm);
  std::strftime(after, sizeof(after), "%d %b %Y", &tm);
  EXPECT_TRUE(out == std::string(before) + "|True" || out == std::string(after) + "|True") << out;
}

TEST(ChatTemplate, GenerationTagRendersBody) {
  // transformers' {% generation %} only marks assistant tokens; the text is unchanged.
  const ChatTemplate t("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}<{{ m.content }}>{% endgeneration %}"
                       "{% else %}{{ m.content }}{% endif %}{% endfor %}");
  EXPECT_EQ(t.render(nlohmann::ordered_json::parse(R"([{"role":"user","content":"u"},{"role":"assistant","content":"a"}])")),
            "u<a>");
}

TEST(ChatTemplate, OptionsAndKeyOrder) {
  const ChatTemplate t("{{ tools | tojson }}|{{ enable_thinking is defined }}|{{ custom }}|{{ messages[0] | tojson }}");
  ChatTemplateOptions opt;
  opt.tools = nlohmann::ordered_json::parse(R"([{"z": 1, "a": 2}])");
  opt.extra_context = {{"custom", "c"}};
  const auto ordered = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(t.render(ordered, opt), R"([{"z": 1, "a": 2}]|False|c|{"role": "user", "content": "x"})");
  // The nlohmann::json overload cannot keep insertion order: keys come out sorted.
  const auto sorted = nlohmann::json::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(t.render(sorted, opt), R"([{"z": 1, "a": 2}]|False|c|{"content": "x", "role": "user"})");
  opt.tools = nullptr;
  opt.enable_thinking = true;
  EXPECT_EQ(t.render(ordered, opt), R"(null|True|c|{"role": "user", "content": "x"})");
}

TEST(ChatTemplate, RecursionIsBoundedNotACrash) {
  const ChatTemplate t("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(error_of([&] { t.render(nlohmann::ordered_json::array()); }).find("recursion"), std::string::npos);
}

// Random fragment soup: every outcome must be a rendered string or a nanovllm::Error.
TEST(ChatTemplate, GarbageNeverCrashes) {
  const std::vector<std::string> frags = {
      "{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " ", "\n", "if", "elif", "else", "endif", "for", "in", "endfor",
      "set", "=", "x", "ns", ".", "attr", "[", "]", "(", ")", "{", "}", ",", ":", "'s'", "\"d\"", "1", "2.5", "|",
      "trim", "length", "tojson", "is", "not", "defined", "and", "or", "~", "*", "/", "//", "%", "**", "==", "<",
      "messages", "loop", "index0", "namespace", "macro", "endmacro", "raise_exception", "break", "::-1", "\\",
      "'", "none", "true", "call", "endcall", "caller", "filter", "endfilter", "items", "range", "-1", "0"};
  std::mt19937 rng(1234);
  const nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src;
    const int n = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < n; ++i) src += frags[rng() % frags.size()];
    try {
      ChatTemplate t(src);
      t.render(msgs);
      ++ok;
    } catch (const Error&) {
      ++errors;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-nanovllm exception " << e.what() << " for template: " << src;
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace nanovllm::chat

namespace nanovllm::chat {
namespace {

TEST(ChatTemplate, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(error_of([&] { ChatTemplate t(parens); }).find("nesting too deep"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of([&] { ChatTemplate t(ifs); }).find("nesting too deep"), std::string::npos);
  std::string nots = "{{ ", negs = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  for (int i = 0; i < 5000; ++i) negs += "- ";
  EXPECT_NE(error_of([&] { ChatTemplate t(nots + "1 }}"); }).find("nesting too deep"), std::string::npos);
  EXPECT_NE(error_of([&] { ChatTemplate t(negs + "1 }}"); }).find("nesting too deep"), std::string::npos);
  // Moderate nesting still works.
  EXPECT_EQ(ChatTemplate("{{ " + std::string(50, '(') + "7" + std::string(50, ')') + " }}").render(nlohmann::ordered_json::array()), "7");
}

}  // namespace
}  // namespace nanovllm::chat
