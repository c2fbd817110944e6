// Structured outputs, tool calls and reasoning over HTTP (the tiny random model with Qwen3's tokenizer and
// chat template: free text is noise, so everything checked here comes from the constraints and parsers):
// response_format json_schema / json_object, vLLM's structured_outputs and guided_* fields, tool_choice
// required / named (message.tool_calls, finish_reason "tool_calls", streamed deltas), the qwen3 reasoning
// parser, finish_reason "length" inside an object.
#include <gtest/gtest.h>

#include <regex>

#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

constexpr int32_t kThink = 151667, kEndThink = 151668;  // <think>, </think> in Qwen3's vocabulary

class StructuredServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::ServerConfig cfg;
    cfg.reasoning_parser = "qwen3";
    EngineConfig ec = server_engine_config();
    ec.model.max_model_len = 1024;  // the tools' instructions in the prompt take ~250 tokens
    server_ = new TestServer(cfg, ec);
  }
  static void TearDownTestSuite() { delete server_; }
  static int port() { return server_->port; }
  static json chat(json extra) {
    json req = {{"messages", json::array({{{"role", "user"}, {"content", "Answer."}}})},
                {"temperature", 1.0},
                {"max_tokens", 150},
                {"chat_template_kwargs", {{"enable_thinking", false}}}};
    for (auto& [k, v] : extra.items()) req[k] = v;
    return req;
  }
  static json post(const json& req, const char* path = "/v1/chat/completions") {
    const HttpResult r = http_post(port(), path, req.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json;
  }
  static TestServer* server_;
};
TestServer* StructuredServer::server_ = nullptr;

const json kSchema = json::parse(R"({"type": "object", "properties": {
    "answer": {"type": "string", "maxLength": 6}, "score": {"type": "integer", "minimum": 1, "maximum": 5},
    "sure": {"type": "boolean"}}, "required": ["answer", "score"], "additionalProperties": false})");

void expect_valid(const json& v, const std::string& text) {
  ASSERT_TRUE(v.is_object()) << text;
  ASSERT_TRUE(v.contains("answer") && v["answer"].is_string()) << text;
  ASSERT_TRUE(v.contains("score") && v["score"].is_number_integer()) << text;
  EXPECT_GE(v["score"].get<int>(), 1) << text;
  EXPECT_LE(v["score"].get<int>(), 5) << text;
  for (const auto& [k, x] : v.items()) EXPECT_TRUE(k == "answer" || k == "score" || k == "sure") << text;
}

TEST_F(StructuredServer, ResponseFormatJsonSchema) {
  for (int seed = 0; seed < 4; ++seed) {
    const json r = post(chat({{"seed", seed},
                              {"response_format", {{"type", "json_schema"},
                                                   {"json_schema", {{"name", "verdict"}, {"schema", kSchema}, {"strict", true}}}}}}));
    const json& choice = r["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "stop") << r.dump();
    const std::string content = choice["message"]["content"];
    expect_valid(json::parse(content), content);
    EXPECT_TRUE(choice["message"]["reasoning_content"].is_null()) << "thinking is off";
  }
}

TEST_F(StructuredServer, StreamedJsonObjectAndCompletionsRegex) {
  const Stream s = post_stream(port(), "/v1/chat/completions",
                               chat({{"seed", 3}, {"stream", true}, {"max_tokens", 200}, {"response_format", {{"type", "json_object"}}}}));
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(s.done);
  std::string text, finish;
  for (const json& c : s.chunks)
    for (const json& ch : c["choices"]) {
      if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
  if (finish == "stop") EXPECT_TRUE(json::parse(text).is_object()) << text;
  else EXPECT_EQ(finish, "length");
  // Completions take the same fields.
  for (const json& field : {json{{"guided_regex", "[a-c]{3}-[0-9]{2}"}},
                            json{{"structured_outputs", {{"regex", "[a-c]{3}-[0-9]{2}"}}}}}) {
    json req = {{"prompt", "Code:"}, {"max_tokens", 20}, {"seed", 1}};
    req.update(field);
    const json r = post(req, "/v1/completions");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_TRUE(std::regex_match(r["choices"][0]["text"].get<std::string>(), std::regex("[a-c]{3}-[0-9]{2}"))) << r.dump();
  }
}

TEST_F(StructuredServer, ChoiceGrammarAndJsonFields) {
  const json choice = post(chat({{"seed", 2}, {"guided_choice", {"red", "green"}}}));
  const std::string c = choice["choices"][0]["message"]["content"];
  EXPECT_TRUE(c == "red" || c == "green") << c;
  const json grammar = post(chat({{"seed", 2}, {"structured_outputs", {{"grammar", "root ::= \"x\" [0-9]{2} \"y\""}}}}));
  EXPECT_TRUE(std::regex_match(grammar["choices"][0]["message"]["content"].get<std::string>(), std::regex("x[0-9]{2}y")));
  const json guided = post(chat({{"seed", 4}, {"guided_json", kSchema.dump()}}));  // a schema as JSON text
  if (guided["choices"][0]["finish_reason"] == "stop") {
    const std::string content = guided["choices"][0]["message"]["content"];
    expect_valid(json::parse(content), content);
  }
}

TEST_F(StructuredServer, MaxTokensInsideTheObjectIsLength) {
  const json r = post(chat({{"max_tokens", 3}, {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}}}}}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                   "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])");

void expect_valid_call(const json& call) {
  ASSERT_TRUE(call["id"].is_string());
  EXPECT_EQ(call["type"], "function");
  const std::string name = call["function"]["name"];
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  if (name == "get_weather") {
    EXPECT_TRUE(args["city"].is_string()) << args;
  } else {
    ASSERT_EQ(name, "add");
    EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << args;
  }
}

TEST_F(StructuredServer, ToolChoiceRequiredAndNamed) {
  int finished = 0;
  for (int seed = 0; seed < 4; ++seed) {
    // With parallel calls a random model goes on calling until max_tokens; a real one stops.
    const bool parallel = seed == 0;
    const json r = post(chat({{"seed", seed}, {"tools", kTools}, {"tool_choice", "required"}, {"max_tokens", 200},
                              {"parallel_tool_calls", parallel}}));
    const json& choice = r["choices"][0];
    if (parallel && choice["finish_reason"] == "length") {
      EXPECT_GE(choice["message"]["tool_calls"].size(), 1u) << r.dump();
      continue;
    }
    ++finished;
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << r.dump();
    EXPECT_EQ(choice["message"]["tool_calls"].size(), parallel ? choice["message"]["tool_calls"].size() : 1u);
    ASSERT_GE(choice["message"]["tool_calls"].size(), 1u);
    for (const json& call : choice["message"]["tool_calls"]) expect_valid_call(call);
    EXPECT_TRUE(choice["message"]["content"].is_null()) << r.dump();
  }
  EXPECT_GE(finished, 3);
  const json named = post(chat({{"seed", 9}, {"tools", kTools}, {"max_tokens", 100},
                                {"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}}}));
  const json& choice = named["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "tool_calls") << named.dump();
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "add");
  expect_valid_call(choice["message"]["tool_calls"][0]);
  const HttpResult unknown = http_post(port(), "/v1/chat/completions",
                                       chat({{"tools", kTools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}).dump());
  EXPECT_EQ(unknown.status, 400);
  EXPECT_EQ(unknown.json["error"]["param"], "tool_choice");
}

TEST_F(StructuredServer, StreamedToolCallDeltas) {
  const Stream s = post_stream(port(), "/v1/chat/completions",
                               chat({{"seed", 5}, {"stream", true}, {"tools", kTools}, {"max_tokens", 100},
                                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}}}));
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(s.done);
  std::string arguments, finish;
  int first_deltas = 0, argument_pieces = 0;
  for (const json& c : s.chunks) {
    for (const json& ch : c["choices"]) {
      if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      if (!ch["delta"].contains("tool_calls")) continue;
      for (const json& d : ch["delta"]["tool_calls"]) {
        EXPECT_EQ(d["index"], 0);
        if (d.contains("id")) {
          ++first_deltas;
          EXPECT_EQ(d["type"], "function");
          EXPECT_EQ(d["function"]["name"], "add");
          EXPECT_EQ(argument_pieces, 0) << "the name comes first";
        }
        const std::string piece = d["function"]["arguments"];
        if (!piece.empty()) ++argument_pieces;
        arguments += piece;
      }
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(first_deltas, 1);
  EXPECT_GT(argument_pieces, 1) << "arguments stream in pieces";
  const json args = json::parse(arguments);
  EXPECT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << arguments;
}

// Thinking on: the model (pushed by logit_bias to open <think> and to close it soon) reasons, then answers
// under the schema; the reasoning comes back as reasoning_content, streamed before the content.
TEST_F(StructuredServer, ReasoningThenConstrainedAnswer) {
  int with_reasoning = 0;
  for (int seed = 0; seed < 6; ++seed) {
    json req = chat({{"seed", seed},
                     {"max_tokens", 150},
                     {"logit_bias", {{std::to_string(kThink), 100}, {std::to_string(kEndThink), 97}}},
                     {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}}}}}});
    req.erase("chat_template_kwargs");  // thinking on (Qwen3's default)
    const json r = post(req);
    const json& m = r["choices"][0]["message"];
    ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
    ASSERT_TRUE(m.contains("reasoning_content")) << r.dump();
    const std::string content = m["content"];
    expect_valid(json::parse(content), content);  // the constraint began after </think>
    if (m["reasoning_content"].is_null()) continue;  // <think></think>: empty reasoning
    ++with_reasoning;
    // Streamed: the same reasoning and content, reasoning first.
    req["stream"] = true;
    const Stream s = post_stream(port(), "/v1/chat/completions", req);
    std::string reasoning, text;
    bool content_started = false, reasoning_after_content = false;
    for (const json& c : s.chunks)
      for (const json& ch : c["choices"]) {
        if (ch["delta"].contains("reasoning_content")) {
          reasoning += ch["delta"]["reasoning_content"].get<std::string>();
          reasoning_after_content |= content_started;
        }
        if (ch["delta"].contains("content") && !ch["delta"]["content"].get<std::string>().empty()) {
          text += ch["delta"]["content"].get<std::string>();
          content_started = true;
        }
      }
    EXPECT_EQ(reasoning, m["reasoning_content"]);
    EXPECT_EQ(text, content);
    EXPECT_FALSE(reasoning_after_content);
  }
  EXPECT_GT(with_reasoning, 0);
}

}  // namespace
}  // namespace nanovllm::testing
