// The endpoints end to end over real loopback sockets: outputs checked against the offline engine
// (LLM::generate of the same prompts, greedy), the streamed chunk sequence, stop strings, n > 1, logprobs.
#include <gtest/gtest.h>

#include "nanovllm/chat/chat_template.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new TestServer();
    llm_ = new LLM(server_engine_config());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete llm_;
  }
  static int port() { return server_->port; }
  // Offline greedy reference.
  static RequestOutput offline(const std::vector<int32_t>& prompt, int64_t max_tokens, int64_t logprobs = 0,
                               bool ignore_eos = true) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.logprobs = logprobs;
    p.ignore_eos = ignore_eos;
    RequestOutput o = llm_->generate(std::vector<std::vector<int32_t>>{prompt}, p).at(0);
    o.text = llm_->decode(o.token_ids);
    return o;
  }
  static std::vector<int32_t> chat_prompt(const json& messages) {
    const std::string text = llm_->engine().chat_template().render(nlohmann::ordered_json(messages));
    return llm_->encode(text, /*add_special_tokens=*/false);
  }
  static TestServer* server_;
  static LLM* llm_;
};
TestServer* ServerApi::server_ = nullptr;
LLM* ServerApi::llm_ = nullptr;

// Concatenated text of one choice of a completions / chat stream.
std::string stream_text(const Stream& s, int64_t index, bool chat) {
  std::string text;
  for (const json& c : s.chunks)
    for (const json& ch : c["choices"])
      if (ch["index"] == index) text += chat ? ch["delta"].value("content", std::string()) : ch["text"].get<std::string>();
  return text;
}

TEST_F(ServerApi, HealthModelsMetrics) {
  const HttpResult h = http_get(port(), "/health");
  EXPECT_EQ(h.status, 200);
  const HttpResult m = http_get(port(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.json["object"], "list");
  ASSERT_FALSE(m.json["data"].empty());
  EXPECT_EQ(m.json["data"][0]["id"], server_model_dir().string());
  EXPECT_EQ(m.json["data"][0]["max_model_len"], 256);
  const HttpResult mt = http_get(port(), "/metrics");
  ASSERT_EQ(mt.status, 200);
  for (const char* name : {"nanovllm_requests_received_total", "nanovllm_prompt_tokens_total",
                           "nanovllm_generation_tokens_total", "nanovllm_time_to_first_token_seconds_bucket",
                           "nanovllm_time_per_output_token_seconds_bucket", "nanovllm_kv_blocks_used",
                           "nanovllm_kv_blocks_free", "nanovllm_num_requests_waiting"})
    EXPECT_NE(mt.body.find(name), std::string::npos) << name;
  EXPECT_EQ(metric(port(), "nanovllm_kv_blocks_total"), 512);
}

// GET /v1/models/{id}: the served names, the path one percent-encoded as SDKs send it; others are 404.
TEST_F(ServerApi, RetrieveModel) {
  const std::string base = server_model_dir().filename().string();
  const HttpResult m = http_get(port(), "/v1/models/" + base);
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.json["id"], base);
  EXPECT_EQ(m.json["object"], "model");
  std::string encoded;
  for (char c : server_model_dir().string()) encoded += c == '/' ? std::string("%2F") : std::string(1, c);
  const HttpResult p = http_get(port(), "/v1/models/" + encoded);
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_EQ(p.json["id"], server_model_dir().string());
  const HttpResult missing = http_get(port(), "/v1/models/gpt-17");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.json["error"]["code"], "model_not_found");
  EXPECT_EQ(http_get(port(), "/v1/models/%zz").status, 404);
}

TEST_F(ServerApi, CompletionsMatchOfflineGreedy) {
  const std::string prompt = "The capital of France is";
  const std::vector<int32_t> ids = llm_->encode(prompt);
  const RequestOutput want = offline(ids, 12);
  const double gen_before = metric(port(), "nanovllm_generation_tokens_total");
  // A text prompt, the same prompt as token ids, and a list of both.
  for (const json& p : {json(prompt), json(ids), json::array({prompt, ids})}) {
    const HttpResult r = http_post(port(), "/v1/completions",
                                   json{{"model", server_model_dir().filename().string()},
                                        {"prompt", p}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}
                                       .dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json["object"], "text_completion");
    const size_t n = p.is_array() && p[0].is_string() ? 2 : 1;
    ASSERT_EQ(r.json["choices"].size(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(r.json["choices"][i]["index"], i);
      EXPECT_EQ(r.json["choices"][i]["text"], want.text);
      EXPECT_EQ(r.json["choices"][i]["finish_reason"], "length");
    }
    EXPECT_EQ(r.json["usage"]["prompt_tokens"], ids.size() * n);
    EXPECT_EQ(r.json["usage"]["completion_tokens"], 12 * n);
    EXPECT_EQ(r.json["usage"]["total_tokens"], (ids.size() + 12) * n);
  }
  EXPECT_EQ(metric(port(), "nanovllm_generation_tokens_total") - gen_before, 12 * 4);
}

TEST_F(ServerApi, CompletionsStreamChunksAgreeWithNonStreamed) {
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult full = http_post(port(), "/v1/completions", req.dump());
  ASSERT_EQ(full.status, 200);
  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  const Stream s = post_stream(port(), "/v1/completions", sreq);
  ASSERT_EQ(s.status, 200);
  ASSERT_TRUE(s.done);
  ASSERT_GE(s.chunks.size(), 3u);
  EXPECT_EQ(stream_text(s, 0, false), full.json["choices"][0]["text"]);
  // Every chunk but the last has "usage": null; the second to last carries the finish reason; the last the usage.
  const json& usage = s.chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], full.json["usage"]);
  const json& fin = s.chunks[s.chunks.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  for (size_t i = 0; i + 1 < s.chunks.size(); ++i) {
    EXPECT_TRUE(s.chunks[i]["usage"].is_null());
    EXPECT_EQ(s.chunks[i]["object"], "text_completion");
    EXPECT_EQ(s.chunks[i]["id"], s.chunks[0]["id"]);
    if (i + 2 < s.chunks.size()) {
      EXPECT_TRUE(s.chunks[i]["choices"][0]["finish_reason"].is_null());
    }
  }
  // Without include_usage: no usage chunk, no usage field.
  sreq.erase("stream_options");
  const Stream s2 = post_stream(port(), "/v1/completions", sreq);
  ASSERT_TRUE(s2.done);
  EXPECT_FALSE(s2.chunks.back()["choices"].empty());
  EXPECT_FALSE(s2.chunks.back().contains("usage"));
  EXPECT_EQ(stream_text(s2, 0, false), full.json["choices"][0]["text"]);
}

TEST_F(ServerApi, ChatStreamSequenceAndContent) {
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                      {{"role", "user"}, {"content", "Name a colour."}}});
  const RequestOutput want = offline(chat_prompt(messages), 8);
  const json req = {{"messages", messages}, {"max_completion_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult full = http_post(port(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(full.status, 200) << full.body;
  EXPECT_EQ(full.json["object"], "chat.completion");
  EXPECT_EQ(full.json["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(full.json["choices"][0]["message"]["content"], want.text);
  EXPECT_EQ(full.json["usage"]["prompt_tokens"], chat_prompt(messages).size());

  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  const Stream s = post_stream(port(), "/v1/chat/completions", sreq);
  ASSERT_TRUE(s.done);
  ASSERT_GE(s.chunks.size(), 4u);
  // role chunk, content deltas, finish chunk (empty delta), usage chunk, [DONE]
  EXPECT_EQ(s.chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  for (size_t i = 1; i + 2 < s.chunks.size(); ++i) {
    EXPECT_FALSE(s.chunks[i]["choices"][0]["delta"].contains("role"));
    EXPECT_FALSE(s.chunks[i]["choices"][0]["delta"]["content"].get<std::string>().empty());
  }
  const json& fin = s.chunks[s.chunks.size() - 2]["choices"][0];
  EXPECT_EQ(fin["finish_reason"], "length");
  EXPECT_TRUE(fin["delta"].empty());
  EXPECT_EQ(s.chunks.back()["usage"], full.json["usage"]);
  EXPECT_EQ(stream_text(s, 0, true), want.text);
}

// The tool-calling round trip as OpenAI clients send it: the assistant's call comes back with "content": null
// (rendered as "", as vLLM does; Qwen3's template tests `'</think>' in message.content`), then the tool's
// answer. The prompt is the template's rendering of both, and the output matches the offline engine.
TEST_F(ServerApi, ToolCallRoundTrip) {
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "get_weather"},
                                                 {"parameters", {{"type", "object"},
                                                                 {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  const json call = {{"id", "call_1"},
                     {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}};
  json messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                               {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}},
                               {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temperature_c\": 21}"}}});
  const json req = {{"messages", messages}, {"tools", tools}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult r = http_post(port(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;

  messages[1]["content"] = "";
  chat::ChatTemplateOptions opt;
  opt.tools = nlohmann::ordered_json(tools);
  const std::string text = llm_->engine().chat_template().render(nlohmann::ordered_json(messages), opt);
  EXPECT_NE(text.find("get_weather"), std::string::npos) << text;
  EXPECT_NE(text.find("temperature_c"), std::string::npos) << text;
  const std::vector<int32_t> prompt = llm_->encode(text, /*add_special_tokens=*/false);
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(r.json["choices"][0]["message"]["content"], offline(prompt, 6).text);
}

// Picks a stop string that straddles a token boundary of the greedy continuation, so it is really hit
// in the middle of the stream, and checks streamed and non-streamed outputs stop right before it.
TEST_F(ServerApi, StopStringAcrossTokenBoundary) {
  const std::string prompt = "In the beginning";
  const RequestOutput ref = offline(llm_->encode(prompt), 40);
  const Tokenizer& tok = llm_->engine().tokenizer();
  std::string stop, want;
  for (size_t k = 4; k + 4 < ref.token_ids.size() && stop.empty(); ++k) {
    const std::string head = tok.decode(std::span(ref.token_ids.data(), k), true);
    const size_t b = head.size();  // a token boundary inside the text
    if (b < 2 || b + 2 > ref.text.size() || ref.text.compare(0, b, head) != 0) continue;
    const std::string cand = ref.text.substr(b - 2, 4);
    bool ascii = true;
    for (char c : cand) ascii &= static_cast<unsigned char>(c) >= 0x21 && static_cast<unsigned char>(c) < 0x7f;
    if (ascii && ref.text.find(cand) == b - 2) {
      stop = cand;
      want = ref.text.substr(0, b - 2);
    }
  }
  ASSERT_FALSE(stop.empty()) << "no ASCII token boundary in: " << ref.text;
  const json req = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true},
                    {"stop", json::array({"@@never@@", stop})}};
  const HttpResult full = http_post(port(), "/v1/completions", req.dump());
  ASSERT_EQ(full.status, 200);
  EXPECT_EQ(full.json["choices"][0]["text"], want) << "stop " << stop;
  EXPECT_EQ(full.json["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(full.json["usage"]["completion_tokens"].get<int>(), 40);
  json sreq = req;
  sreq["stream"] = true;
  const Stream s = post_stream(port(), "/v1/completions", sreq);
  ASSERT_TRUE(s.done);
  EXPECT_EQ(stream_text(s, 0, false), want);
  for (const json& c : s.chunks) EXPECT_EQ(c.dump().find(stop), std::string::npos) << c.dump();
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(wait_metric(port(), "nanovllm_kv_blocks_used", 0), 0);  // the stopped request's blocks were freed
}

TEST_F(ServerApi, NChoicesSeededAndGreedy) {
  const json req = {{"prompt", "Hello"}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 1234},
                    {"n", 3}, {"ignore_eos", true}};
  const HttpResult a = http_post(port(), "/v1/completions", req.dump());
  const HttpResult b = http_post(port(), "/v1/completions", req.dump());
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(a.json["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.json["choices"][i]["index"], i);
    EXPECT_EQ(a.json["choices"][i]["text"], b.json["choices"][i]["text"]);  // seeded: reproducible
  }
  EXPECT_EQ(a.json["usage"]["completion_tokens"], 18);
  EXPECT_EQ(a.json["usage"]["prompt_tokens"], llm_->encode("Hello").size());
  // Different seeds per choice: with a random model and temperature 1 they differ.
  EXPECT_FALSE(a.json["choices"][0]["text"] == a.json["choices"][1]["text"] &&
               a.json["choices"][1]["text"] == a.json["choices"][2]["text"]);
  // Greedy n = 2, streamed: both choices equal the offline output, each with its own finish chunk.
  const RequestOutput want = offline(llm_->encode("Hello"), 6);
  const Stream s = post_stream(port(), "/v1/chat/completions",
                               {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"n", 2},
                                {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_TRUE(s.done);
  const RequestOutput want_chat = offline(chat_prompt({{{"role", "user"}, {"content", "Hello"}}}), 6);
  int roles = 0, finishes = 0;
  for (const json& c : s.chunks) {
    roles += c["choices"][0]["delta"].contains("role");
    finishes += !c["choices"][0]["finish_reason"].is_null();
  }
  EXPECT_EQ(roles, 2);
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(stream_text(s, 0, true), want_chat.text);
  EXPECT_EQ(stream_text(s, 1, true), want_chat.text);
  (void)want;
}

TEST_F(ServerApi, LogprobsMatchOfflineEngine) {
  const std::vector<int32_t> ids = llm_->encode("Logprobs are");
  const RequestOutput want = offline(ids, 5, 3);
  // completions: logprobs = 3
  const HttpResult c = http_post(port(), "/v1/completions",
                                 json{{"prompt", ids}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true},
                                      {"logprobs", 3}}.dump());
  ASSERT_EQ(c.status, 200);
  const json& lp = c.json["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want.logprobs[i][0].logprob, 1e-5);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u);
  }
  // chat: logprobs + top_logprobs = 2, streamed and not; the greedy token is the top-1 entry.
  const json messages = {{{"role", "user"}, {"content", "Hi there"}}};
  const RequestOutput wc = offline(chat_prompt(messages), 4, 2);
  json req = {{"messages", messages}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true},
              {"logprobs", true}, {"top_logprobs", 2}};
  const HttpResult full = http_post(port(), "/v1/chat/completions", req.dump());
  ASSERT_EQ(full.status, 200) << full.body;
  const json& content = full.json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(content[i]["logprob"].get<double>(), wc.logprobs[i][0].logprob, 1e-5);
    ASSERT_EQ(content[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[i]["top_logprobs"][0]["token"], content[i]["token"]);
    EXPECT_GE(content[i]["top_logprobs"][0]["logprob"].get<double>(), content[i]["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_NEAR(content[i]["top_logprobs"][1]["logprob"].get<double>(), wc.logprobs[i][1].logprob, 1e-5);
  }
  req["stream"] = true;
  const Stream s = post_stream(port(), "/v1/chat/completions", req);
  json streamed = json::array();
  for (const json& ch : s.chunks)
    if (!ch["choices"][0]["logprobs"].is_null())
      for (const json& e : ch["choices"][0]["logprobs"]["content"]) streamed.push_back(e);
  EXPECT_EQ(streamed, content);
}

TEST_F(ServerApi, ShutdownAbortsInFlightStreamsAndClosesListener) {
  server::ServerConfig cfg;
  cfg.shutdown_grace_s = 0.2;
  TestServer local(cfg);
  server::SseResult result;
  std::atomic<int> chunks{0};
  std::thread client([&] {
    result = server::post_sse("127.0.0.1", local.port, "/v1/completions",
                              json{{"prompt", "Long"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}}.dump(),
                              [&](const std::string&) { ++chunks; return true; });
  });
  for (int i = 0; i < 5000 && chunks < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(chunks, 2);
  local.server->shutdown();
  client.join();
  EXPECT_EQ(result.status, 200);
  EXPECT_TRUE(result.done);  // the stream was finished properly, not cut
  ASSERT_FALSE(result.events.empty());
  const json last = json::parse(result.events.back());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "abort");
  EXPECT_EQ(http_get(local.port, "/health").status, 0);  // the listener is closed
}

}  // namespace
}  // namespace nanovllm::testing
