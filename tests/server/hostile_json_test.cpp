// Hostile JSON (issue problem 1): nesting deep enough to overflow a recursive walk of the parsed body —
// 80,000 levels at the top, 40,000 inside the fields the chat template receives — gets a 400 naming the
// limit, and the server keeps serving. Nesting within the limit still works.
#include <gtest/gtest.h>

#include "server/raw_http.h"
#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(static_cast<size_t>(depth), '}');
  return s;
}

TEST(HostileJson, DeepNestingGets400AndTheServerSurvives) {
  TestServer ts;
  const std::string msg = R"("messages": [{"role": "user", "content": "hi"}])";
  struct Case {
    const char* name;
    const char* path;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"80k arrays at the top", "/v1/completions", R"({"prompt": "a", "x": )" + nested(80000) + "}"},
      {"80k objects at the top", "/v1/completions", R"({"prompt": "a", "x": )" + nested_objects(80000) + "}"},
      {"40k in chat_template_kwargs", "/v1/chat/completions",
       "{" + msg + R"(, "chat_template_kwargs": {"k": )" + nested(40000) + "}}"},
      {"40k in tools", "/v1/chat/completions", "{" + msg + R"(, "tools": )" + nested(40000) + "}"},
      {"40k in tool_calls", "/v1/chat/completions",
       R"({"messages": [{"role": "assistant", "content": null, "tool_calls": )" + nested(40000) + "}]}"},
      {"65 levels (one past the limit)", "/v1/completions", R"({"prompt": "a", "x": )" + nested(64) + "}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const HttpResult r = http_post(ts.port, c.path, c.body);
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
    ASSERT_TRUE(r.json.is_object()) << r.body.substr(0, 300);
    EXPECT_NE(r.json["error"]["message"].get<std::string>().find("nest"), std::string::npos) << r.body;
    EXPECT_GE(health_ms(ts.port), 0);
  }
  // Deep but within the limit: the template gets the kwargs (unused ones are fine).
  const HttpResult ok = http_post(
      ts.port, "/v1/chat/completions",
      "{" + msg + R"(, "max_tokens": 2, "chat_template_kwargs": {"k": )" + nested(60) + "}}");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace nanovllm::testing
