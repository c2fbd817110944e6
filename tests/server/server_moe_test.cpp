// The server in front of a Qwen3MoeForCausalLM (the qwen3-moe-tiny preset with the real Qwen3 tokenizer): text
// completions, streamed and not, give the offline engine's greedy text.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/server_test_util.h"
#include "support/test_models.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

EngineConfig moe_engine_config() {
  EngineConfig c = server_engine_config();
  c.model.path = preset_model_dir("qwen3-moe-tiny", "server-moe",
                                  {{"vocab_size", 151936}, {"eos_token_id", 151645}, {"bos_token_id", 151643}}, 23,
                                  /*qwen3_tokenizer=*/true);
  return c;
}

TEST(ServerMoe, CompletionsGiveTheOfflineGreedyText) {
  const EngineConfig ec = moe_engine_config();
  TestServer server({}, ec);
  LLM llm(ec);
  const std::string prompt = "Experts route tokens";
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 10;
  sp.ignore_eos = true;
  const RequestOutput want = llm.generate(std::vector<std::vector<int32_t>>{llm.encode(prompt)}, sp).at(0);
  const std::string want_text = llm.decode(want.token_ids);
  const json body{{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpResult r = http_post(server.port, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"], want_text);
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 10);
  json streamed = body;
  streamed["stream"] = true;
  const Stream s = post_stream(server.port, "/v1/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_TRUE(s.done);
  std::string text;
  for (const json& c : s.chunks)
    for (const json& ch : c["choices"]) text += ch["text"].get<std::string>();
  EXPECT_EQ(text, want_text);
}

}  // namespace
}  // namespace nanovllm::testing
