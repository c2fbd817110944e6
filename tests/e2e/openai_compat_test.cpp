// OpenAI request bodies as the official SDKs (the Node SDK, openai 6.x) send them, through the server's
// request parsing (server/protocol.h) on a tiny model with the Qwen3 tokenizer and chat template:
//  * the tool-calling round trip: an assistant turn with "content": null and tool_calls (arguments a JSON
//    string), then the tool's answer. It was a 400 (the chat template failed on the null content).
//  * logit_bias: {"token id": bias}, into SamplingParams; bad maps are 400s naming "logit_bias".
#include <gtest/gtest.h>

#include <fstream>

#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/protocol.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

using server::ApiException;
using server::Endpoint;

class OpenAiCompat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineConfig c;
    c.model.path = testing::text_model_dir();
    c.model.backend = Backend::kCpu;
    c.cache.kv_cache_bytes = 64LL << 20;
    engine_ = new LLMEngine(c);
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  static server::ModelContext context() {
    server::ModelContext ctx;
    ctx.engine = engine_;
    ctx.served_names = {"qwen3-tiny"};
    ctx.vocab_size = engine_->model_config().vocab_size;
    ctx.max_model_len = engine_->config().model.max_model_len;
    return ctx;
  }

  // The 400's param, or "<accepted>".
  static std::string rejected_param(const std::string& body) {
    try {
      server::parse_generation_request(Endpoint::kChat, body, context());
    } catch (const ApiException& e) {
      EXPECT_EQ(e.error().status, 400);
      return e.error().param;
    }
    return "<accepted>";
  }

  static LLMEngine* engine_;
};

LLMEngine* OpenAiCompat::engine_ = nullptr;

TEST_F(OpenAiCompat, ToolCallRoundTripWithNullContent) {
  // The golden rendering (tests/data/chat/golden.json, jinja2 set up as transformers does, checked against
  // transformers' apply_chat_template by scripts/chat_template_hf_check.py) of the round trip with the
  // assistant's content "", and the same conversation as `client.chat.completions.create({model, messages,
  // tools})` sends it after a tool call: "content": null.
  const auto golden = nlohmann::ordered_json::parse(
      std::ifstream(std::string(NANOVLLM_TEST_DATA) + "/chat/golden.json"));
  const nlohmann::ordered_json* expected = nullptr;
  for (const auto& c : golden["template_cases"])
    if (c["name"] == "qwen3/tool_round_trip_openai/tools") expected = &c;
  ASSERT_NE(expected, nullptr);
  nlohmann::ordered_json body = {{"model", "qwen3-tiny"}, {"max_tokens", 4}, {"messages", (*expected)["messages"]},
                                 {"tools", (*expected)["tools"]}};
  ASSERT_EQ(body["messages"][1]["content"], "");
  ASSERT_TRUE(body["messages"][1].contains("tool_calls"));
  body["messages"][1]["content"] = nullptr;
  server::GenerationRequest r;
  try {
    r = server::parse_generation_request(Endpoint::kChat, body.dump(), context());
  } catch (const ApiException& e) {
    FAIL() << e.error().status << " " << e.error().message;
  }
  ASSERT_EQ(r.prompts.size(), 1u);
  const std::string text = (*expected)["expected"];
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\""),
            std::string::npos);
  EXPECT_EQ(r.prompts[0], engine_->tokenizer().encode(text, /*add_special_tokens=*/false));
  // A user turn still needs content.
  EXPECT_EQ(rejected_param(R"({"messages": [{"role": "user", "content": null}]})"), "messages[0].content");
}

TEST_F(OpenAiCompat, LogitBias) {
  const auto r = server::parse_generation_request(
      Endpoint::kCompletions, R"({"prompt": [1, 2, 3], "logit_bias": {"42": -100, "7": 5.5, "151935": 100}})",
      context());
  EXPECT_EQ(r.params.logit_bias, (std::map<int32_t, float>{{7, 5.5f}, {42, -100.0f}, {151935, 100.0f}}));
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": {"42": -100.5}})"), "logit_bias");
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": {"151936": 1}})"), "logit_bias");
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": {"-1": 1}})"), "logit_bias");
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": {"abc": 1}})"), "logit_bias");
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": {"5": "1"}})"), "logit_bias");
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": [1, 2]})"), "logit_bias");
  std::string many = "{";
  for (int i = 0; i < 301; ++i) many += (i ? ", \"" : "\"") + std::to_string(i) + "\": 1";
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": )" + many + "}}"), "logit_bias");
  EXPECT_EQ(rejected_param("{" + msgs + R"(, "logit_bias": null})"), "<accepted>");
  // And the engine honours it: +100 on one token makes every greedy token that one.
  auto forced = server::parse_generation_request(
      Endpoint::kCompletions, R"({"prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0, "ignore_eos": true,
                                  "logit_bias": {"1234": 100}})", context());
  const int64_t id = engine_->add_request(forced.prompts[0], forced.params);
  std::vector<RequestOutput> done;
  while (engine_->has_unfinished())
    for (RequestOutput& o : engine_->step()) done.push_back(std::move(o));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].request_id, id);
  EXPECT_EQ(done[0].token_ids, std::vector<int32_t>(5, 1234));
}

}  // namespace
}  // namespace nanovllm
