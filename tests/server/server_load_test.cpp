// Load: 64 concurrent streaming clients get exactly the offline engine's greedy outputs; then 64 more of
// which half disconnect mid-stream: their requests are cancelled and every KV block comes back.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "nanovllm/tokenizer/tokenizer.h"
#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

constexpr int kClients = 64;
constexpr int kMaxTokens = 8;

std::vector<std::vector<int32_t>> prompts(int n, uint64_t seed) {
  std::vector<std::vector<int32_t>> out;
  uint64_t x = seed;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(3 + i % 13));
    for (int32_t& t : p) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int32_t>(1000 + (x >> 33) % 30000);
    }
    out.push_back(std::move(p));
  }
  return out;
}

json request(const std::vector<int32_t>& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true},
          {"stream", true}, {"stream_options", {{"include_usage", true}}}};
}

TEST(ServerLoad, ConcurrentStreamsMatchOfflineAndDisconnectsFreeBlocks) {
  const auto ps = prompts(kClients, 7);
  // Offline reference first (its own engine).
  std::vector<std::vector<int32_t>> want;
  {
    LLM llm(server_engine_config());
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = kMaxTokens;
    p.ignore_eos = true;
    for (const RequestOutput& o : llm.generate(ps, p)) want.push_back(o.token_ids);
  }
  TestServer ts;
  const Tokenizer& tok = ts.engine->tokenizer();

  // 1. Everyone completes, with the right content.
  std::vector<std::string> texts(kClients);
  std::vector<int> statuses(kClients, 0), completion_tokens(kClients, -1);
  // Not std::vector<bool>: it packs the flags into shared words, so two clients setting their own done[i]
  // at once race (a non-atomic read-modify-write of one word) and one flag can be lost.
  std::vector<char> done(kClients, false);
  {
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&, i] {
        const Stream s = post_stream(ts.port, "/v1/completions", request(ps[i], kMaxTokens));
        statuses[i] = s.status;
        done[i] = s.done;
        for (const json& c : s.chunks) {
          if (!c["choices"].empty()) texts[i] += c["choices"][0]["text"].get<std::string>();
          if (c["usage"].is_object()) completion_tokens[i] = c["usage"]["completion_tokens"];
        }
      });
    for (std::thread& t : clients) t.join();
  }
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(statuses[i], 200);
    EXPECT_TRUE(done[i]);
    EXPECT_EQ(texts[i], tok.decode(want[i], true));
    EXPECT_EQ(completion_tokens[i], kMaxTokens);
  }
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_kv_blocks_used", 0), 0);

  // 2. Half of the clients hang up after their second chunk; the others finish normally.
  const int long_tokens = 200;
  std::atomic<int> finished_ok{0}, hung_up{0};
  {
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&, i] {
        const bool leave = i % 2 == 0;
        int seen = 0;
        const server::SseResult r = server::post_sse(
            "127.0.0.1", ts.port, "/v1/completions", request(ps[i], leave ? long_tokens : kMaxTokens).dump(),
            [&](const std::string&) { return !(leave && ++seen >= 2); });
        if (leave && r.cancelled) ++hung_up;
        if (!leave && r.status == 200 && r.done) ++finished_ok;
      });
    for (std::thread& t : clients) t.join();
  }
  EXPECT_EQ(hung_up, kClients / 2);
  EXPECT_EQ(finished_ok, kClients / 2);
  // The server notices each hang-up, aborts the request and frees its blocks well before 200 tokens.
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_kv_blocks_used", 0, 20), 0);
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_http_requests_in_flight", 0), 0);
  EXPECT_EQ(metric(ts.port, "nanovllm_client_disconnects_total"), kClients / 2);
  EXPECT_EQ(metric(ts.port, "nanovllm_request_success_total{finished_reason=\"abort\"}") >= 0, true);
  EXPECT_LT(metric(ts.port, "nanovllm_generation_tokens_total"),
            2 * kClients * kMaxTokens + (kClients / 2) * long_tokens);
  EXPECT_EQ(http_get(ts.port, "/health").status, 200);
}

}  // namespace
}  // namespace nanovllm::testing
