// Byte-for-byte comparison of ChatTemplate against jinja2 (set up like HF transformers'
// apply_chat_template) on real chat templates and on one-construct feature templates.
// Goldens: tests/data/chat/golden.json, written by scripts/chat_template_golden.py.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat {
namespace {

const std::string kDir = std::string(NANOVLLM_TEST_DATA) + "/chat/";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const nlohmann::ordered_json& golden() {
  static const nlohmann::ordered_json g = nlohmann::ordered_json::parse(read_text(kDir + "golden.json"));
  return g;
}

struct TemplateInfo {
  const char* file;
  const char* bos;
  const char* eos;
};
const std::map<std::string, TemplateInfo> kTemplates = {
    {"qwen3", {"qwen3.jinja", "", "<|im_end|>"}},
    {"qwen2.5_instruct", {"qwen2.5_instruct.jinja", "", "<|im_end|>"}},
    {"llama3.1_instruct", {"llama3.1_instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"}},
    {"glm4_chat", {"glm4_chat.jinja", "", "<|endoftext|>"}},
};

ChatTemplateOptions options_of(const nlohmann::ordered_json& c) {
  ChatTemplateOptions opt;
  opt.add_generation_prompt = c.value("add_generation_prompt", true);
  if (c.contains("enable_thinking")) opt.enable_thinking = c["enable_thinking"].get<bool>();
  if (c.contains("tools")) opt.tools = c["tools"];
  if (c.contains("extra_context")) opt.extra_context = c["extra_context"];
  return opt;
}

// For an expected-error case: the construction or the render must throw nanovllm::Error; errors the
// template raises itself must carry its message.
void expect_error(const nlohmann::ordered_json& c, const std::function<std::string()>& run) {
  const std::string expected = c["error"].get<std::string>();
  try {
    const std::string out = run();
    ADD_FAILURE() << c["name"] << ": expected an error (" << expected << "), rendered:\n" << out;
  } catch (const Error& e) {
    const std::string prefix = "TemplateError: ";
    if (expected.rfind(prefix, 0) == 0) {
      EXPECT_NE(std::string(e.what()).find(expected.substr(prefix.size())), std::string::npos)
          << c["name"] << ": " << e.what();
    }
    EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateGolden, RealTemplatesMatchJinja2) {
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, info] : kTemplates)
    templates.emplace(name, ChatTemplate(read_text(kDir + info.file), info.bos, info.eos));
  int checked = 0;
  for (const auto& c : golden()["template_cases"]) {
    const ChatTemplate& t = templates.at(c["template"].get<std::string>());
    const auto opt = options_of(c);
    const auto& messages = c["messages"];
    if (c.contains("error")) {
      expect_error(c, [&] { return t.render(messages, opt); });
    } else {
      std::string out;
      try {
        out = t.render(messages, opt);
      } catch (const Error& e) {
        ADD_FAILURE() << c["name"] << ": unexpected error " << e.what();
        continue;
      }
      EXPECT_EQ(out, c["expected"].get<std::string>()) << c["name"];
    }
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(ChatTemplateGolden, FeatureTemplatesMatchJinja2) {
  int checked = 0;
  for (const auto& c : golden()["feature_cases"]) {
    const std::string source = c["template_source"].get<std::string>();
    ChatTemplateOptions opt;
    opt.extra_context = c["extra_context"];
    const nlohmann::ordered_json no_messages = nlohmann::ordered_json::array();
    if (c.contains("error")) {
      expect_error(c, [&] { return ChatTemplate(source).render(no_messages, opt); });
    } else {
      std::string out;
      try {
        out = ChatTemplate(source).render(no_messages, opt);
      } catch (const Error& e) {
        ADD_FAILURE() << c["name"] << ": unexpected error " << e.what();
        continue;
      }
      EXPECT_EQ(out, c["expected"].get<std::string>()) << c["name"] << "\ntemplate: " << source;
    }
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace nanovllm::chat
