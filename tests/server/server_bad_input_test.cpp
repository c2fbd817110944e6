// Bad input: every mistake gets the right status and an OpenAI error object, and the server stays healthy
// (/health 200 and a normal request succeeds) after each one.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

constexpr const char* kKey = "sk-test-1234";

class ServerBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::ServerConfig cfg;
    cfg.api_key = kKey;
    cfg.max_body_bytes = 64 * 1024;
    cfg.max_concurrent_requests = 4;
    server_ = new TestServer(cfg);
  }
  static void TearDownTestSuite() { delete server_; }
  static int port() { return server_->port; }

  static void expect_healthy() {
    EXPECT_EQ(http_get(port(), "/health").status, 200);
    const HttpResult ok = http_post(port(), "/v1/completions",
                                    json{{"prompt", "ok"}, {"max_tokens", 2}, {"temperature", 0}}.dump(), kKey);
    EXPECT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.json["choices"].size(), 1u);
  }
  static TestServer* server_;
};
TestServer* ServerBadInput::server_ = nullptr;

void expect_error(const HttpResult& r, int status, const std::string& param = "") {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.json.is_object()) << r.body;
  ASSERT_TRUE(r.json.contains("error")) << r.body;
  const json& e = r.json["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  // No source paths in messages.
  EXPECT_EQ(e["message"].get<std::string>().find(".cpp:"), std::string::npos) << r.body;
}

TEST_F(ServerBadInput, TableOfMistakes) {
  struct Case {
    const char* name;
    const char* path;
    std::string body;
    int status;
    const char* param;
  };
  const auto chat = [](const std::string& extra) {
    return R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}";
  };
  const std::string long_prompt = [] {
    json ids = json::array();
    for (int i = 0; i < 300; ++i) ids.push_back(1000 + i);
    return json{{"prompt", ids}}.dump();
  }();
  const std::vector<Case> cases = {
      {"invalid JSON", "/v1/completions", "{\"prompt\": \"a\",", 400, ""},
      {"not an object", "/v1/completions", "[1, 2]", 400, ""},
      {"empty body", "/v1/completions", "", 400, ""},
      {"missing prompt", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"missing messages", "/v1/chat/completions", R"({"max_tokens": 3})", 400, "messages"},
      {"empty messages", "/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"message without role", "/v1/chat/completions", R"({"messages": [{"content": "x"}]})", 400,
       "messages[0].role"},
      {"unknown role", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400,
       "messages[0].role"},
      {"content of wrong type", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", 400,
       "messages[0].content"},
      {"prompt of wrong type", "/v1/completions", R"({"prompt": 5})", 400, "prompt"},
      {"empty prompt list", "/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"empty text prompt", "/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"token id out of vocab", "/v1/completions", R"({"prompt": [1, 999999999]})", 400, "prompt"},
      {"negative token id", "/v1/completions", R"({"prompt": [-1]})", 400, "prompt"},
      {"max_tokens string", "/v1/completions", R"({"prompt": "a", "max_tokens": "10"})", 400, "max_tokens"},
      {"negative max_tokens", "/v1/completions", R"({"prompt": "a", "max_tokens": -5})", 400, "max_tokens"},
      {"zero max_tokens", "/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens"},
      {"huge max_tokens", "/v1/completions", R"({"prompt": "a", "max_tokens": 100000000000})", 400, "max_tokens"},
      {"max_tokens overflow", "/v1/completions", R"({"prompt": "a", "max_tokens": 18446744073709551615})", 400,
       "max_tokens"},
      {"fractional max_tokens", "/v1/completions", R"({"prompt": "a", "max_tokens": 2.5})", 400, "max_tokens"},
      {"prompt too long", "/v1/completions", long_prompt, 400, "prompt"},
      {"temperature string", "/v1/completions", R"({"prompt": "a", "temperature": "hot"})", 400, "temperature"},
      {"negative temperature", "/v1/completions", R"({"prompt": "a", "temperature": -1})", 400, "temperature"},
      {"top_p zero", "/v1/completions", R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
      {"top_k too small", "/v1/completions", R"({"prompt": "a", "top_k": -2})", 400, "top_k"},
      {"penalty out of range", "/v1/completions", R"({"prompt": "a", "presence_penalty": 3})", 400,
       "presence_penalty"},
      {"n zero", "/v1/completions", R"({"prompt": "a", "n": 0})", 400, "n"},
      {"n too large", "/v1/completions", R"({"prompt": "a", "n": 1000})", 400, "n"},
      {"stop of wrong type", "/v1/completions", R"({"prompt": "a", "stop": 3})", 400, "stop"},
      {"empty stop string", "/v1/completions", R"({"prompt": "a", "stop": [""]})", 400, "stop"},
      {"logprobs too many", "/v1/completions", R"({"prompt": "a", "logprobs": 50})", 400, "logprobs"},
      {"chat logprobs not bool", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 3})", 400, "logprobs"},
      {"top_logprobs without logprobs", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400, "top_logprobs"},
      {"stream not bool", "/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400, "stream"},
      {"stream_options without stream", "/v1/completions",
       R"({"prompt": "a", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {"seed of wrong type", "/v1/completions", R"({"prompt": "a", "seed": "x"})", 400, "seed"},
      {"unknown model", "/v1/completions", R"({"model": "gpt-17", "prompt": "a"})", 404, ""},
      {"model of wrong type", "/v1/completions", R"({"model": 3, "prompt": "a"})", 400, "model"},
      {"invalid UTF-8 in prompt", "/v1/completions", std::string("{\"prompt\": \"ab\xff\xfe\"}"), 400, ""},
      {"invalid UTF-8 in message", "/v1/chat/completions",
       std::string("{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}"), 400, ""},
      {"unknown endpoint", "/v1/embeddings", R"({"input": "a"})", 404, ""},
      // Parameters the engine does not implement are refused by name, not ignored.
      {"unknown parameter", "/v1/completions", R"({"prompt": "a", "guided_decoding_backend": "x"})", 400,
       "guided_decoding_backend"},
      {"echo", "/v1/completions", R"({"prompt": "a", "echo": true})", 400, "echo"},
      {"best_of", "/v1/completions", R"({"prompt": "a", "best_of": 3})", 400, "best_of"},
      {"suffix", "/v1/completions", R"({"prompt": "a", "suffix": "z"})", 400, "suffix"},
      {"top_logprobs on completions", "/v1/completions", R"({"prompt": "a", "top_logprobs": 2})", 400,
       "top_logprobs"},
      {"unknown response_format", "/v1/chat/completions", chat(R"("response_format": {"type": "xml"})"), 400,
       "response_format"},
      {"unsupported schema keyword", "/v1/chat/completions",
       chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"not": {}}}})"), 400,
       "response_format"},
      {"two constraints", "/v1/completions", R"({"prompt": "a", "guided_regex": "a", "guided_choice": ["a"]})", 400,
       "guided_choice"},
      {"structured_outputs with two kinds", "/v1/completions",
       R"({"prompt": "a", "structured_outputs": {"regex": "a", "json": {}}})", 400, "structured_outputs"},
      {"regex with a backreference", "/v1/completions", R"({"prompt": "a", "guided_regex": "(a)\\1"})", 400,
       "guided_regex"},
      {"required tool call", "/v1/chat/completions", chat(R"("tool_choice": "required")"), 400, "tool_choice"},
      {"named tool call", "/v1/chat/completions",
       chat(R"("tool_choice": {"type": "function", "function": {"name": "f"}})"), 400, "tool_choice"},
      {"functions", "/v1/chat/completions", chat(R"("functions": [{"name": "f"}])"), 400, "functions"},
      {"reasoning_effort", "/v1/chat/completions", chat(R"("reasoning_effort": "low")"), 400, "reasoning_effort"},
      {"audio", "/v1/chat/completions", chat(R"("modalities": ["text", "audio"])"), 400, "modalities"},
      {"store", "/v1/chat/completions", chat(R"("store": true)"), 400, "store"},
      {"parallel_tool_calls not bool", "/v1/chat/completions", chat(R"("parallel_tool_calls": "no")"), 400,
       "parallel_tool_calls"},
      {"echo on chat", "/v1/chat/completions", chat(R"("echo": false)"), 400, "echo"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_error(http_post(port(), c.path, c.body, kKey), c.status, c.param);
    EXPECT_EQ(http_get(port(), "/health").status, 200);
  }
  expect_error(http_get(port(), "/v1/nothing-here", kKey), 404);
  expect_healthy();
}

// The value that asks for nothing passes for each parameter the engine does not implement; so do labels and
// nulls.
TEST_F(ServerBadInput, DefaultValuesOfUnimplementedParametersPass) {
  const HttpResult c = http_post(port(), "/v1/completions",
                                 R"({"prompt": "a", "max_tokens": 1, "echo": false, "best_of": 2, "n": 2, "suffix": "",
                                     "user": "u", "logit_bias": {}, "guided_json": null})",
                                 kKey);
  EXPECT_EQ(c.status, 200) << c.body;
  const HttpResult ch = http_post(
      port(), "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "response_format": {"type": "text"},
          "tool_choice": "none", "parallel_tool_calls": true, "modalities": ["text"], "store": false,
          "service_tier": "auto", "metadata": {"k": "v"}, "prompt_cache_key": "p", "safety_identifier": "s"})",
      kKey);
  EXPECT_EQ(ch.status, 200) << ch.body;
}

TEST_F(ServerBadInput, ApiKey) {
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 1}}.dump();
  expect_error(http_post(port(), "/v1/completions", body), 401);
  expect_error(http_post(port(), "/v1/completions", body, "sk-wrong"), 401);
  expect_error(http_get(port(), "/v1/models", "sk-test-123"), 401);
  EXPECT_EQ(http_get(port(), "/v1/models", kKey).status, 200);
  EXPECT_EQ(http_get(port(), "/health").status, 200);  // health and metrics need no key
  EXPECT_EQ(http_get(port(), "/metrics").status, 200);
  expect_healthy();
}

TEST_F(ServerBadInput, OversizedBody) {
  const std::string big = json{{"prompt", std::string(200 * 1024, 'a')}}.dump();
  expect_error(http_post(port(), "/v1/completions", big, kKey), 413);
  expect_healthy();
}

TEST_F(ServerBadInput, TooManyConcurrentRequestsGet429) {
  // 4 slow streams hold every slot; a fifth request is refused, and succeeds once they are done.
  std::vector<std::thread> holders;
  std::atomic<int> started{0};
  for (int i = 0; i < 4; ++i)
    holders.emplace_back([&] {
      server::post_sse("127.0.0.1", port(), "/v1/completions",
                       json{{"prompt", "slow"}, {"max_tokens", 60}, {"ignore_eos", true}, {"stream", true}}.dump(),
                       [&](const std::string&) {
                         ++started;
                         return true;
                       },
                       kKey);
    });
  for (int i = 0; i < 5000 && started < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(started, 4);
  // Every holder got a chunk, so all 4 are in flight (60 tokens each take far longer than this request).
  const HttpResult r = http_post(port(), "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 1}}.dump(), kKey);
  expect_error(r, 429);
  for (std::thread& t : holders) t.join();
  EXPECT_GE(metric(port(), "nanovllm_requests_rejected_total"), 1);
  expect_healthy();
}

}  // namespace
}  // namespace nanovllm::testing
