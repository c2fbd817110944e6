// Hostile requests, round two (issue 45): every request has a bounded cost. Cheap requests used to take the
// service down: a 5 MB body holding 1,024 private copies of 40K-token prompts, requests counted as one
// whatever their n, max_tokens near 2^63, one long prefill starving every short request behind it, and
// logprobs kept as JSON (~10 KB a token) for a whole stream. Each test sends the attack and checks the
// bound: a 400 naming the limit, memory, or a short request's latency. Loopback only, bounded in time.
#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/server/response_builder.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "server/raw_http.h"
#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr size_t kMiB = 1u << 20;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string error_message(const HttpResult& r) {
  return r.json.is_object() && r.json.contains("error") ? r.json["error"]["message"].get<std::string>() : r.body;
}

// The issue's body (item 4): `num_prompts` (the issue: 64, 5.1 MB) prompts of 40,000 token ids (one digit
// each) and `n` choices each.
std::string amplifying_body(int num_prompts, int64_t n, bool stream) {
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(num_prompts), std::vector<int32_t>(40000));
  for (auto& p : prompts)
    for (size_t i = 0; i < p.size(); ++i) p[i] = 1 + static_cast<int32_t>(i % 9);
  return R"({"prompt": )" + prompt_lists_json(prompts) + R"(, "n": )" + std::to_string(n) +
         R"(, "max_tokens": 1, "stream": )" + (stream ? "true" : "false") + "}";
}

// The test engine with room for one 40K-token prompt at a time.
EngineConfig long_context_engine() {
  EngineConfig c = server_engine_config();
  c.model.max_model_len = 40960;
  c.cache.num_kv_blocks = 2600;
  return c;
}

// Samples this process's RSS (the server runs in it) while `work` runs; returns the peak.
size_t peak_rss_during(const std::function<void()>& work) {
  std::atomic<bool> running{true};
  std::atomic<size_t> peak{rss_bytes()};
  std::thread sampler([&] {
    while (running) {
      peak = std::max<size_t>(peak, rss_bytes());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  work();
  running = false;
  sampler.join();
  return peak;
}

void expect_peak_below(size_t idle, size_t peak, size_t slack) {
  if (!rss_is_meaningful()) return;  // ASan keeps freed memory in its quarantine
  std::printf("RSS: idle %zu MiB, peak %zu MiB\n", idle / kMiB, peak / kMiB);
  EXPECT_LT(peak, idle + slack) << "idle " << idle / kMiB << " MiB, peak " << peak / kMiB << " MiB";
}

// Reads from `c` until the response header is in (a stream's head comes when the engine accepts it).
bool wait_for_head(RawConn& c, std::string& bytes, double timeout_s) {
  const auto t0 = Clock::now();
  while (bytes.find("\r\n\r\n") == std::string::npos && seconds_since(t0) < timeout_s) {
    const std::string more = c.read_until_close(0.05);
    bytes += more;
  }
  return bytes.rfind("HTTP/1.1 200", 0) == 0;
}

// Item 4: two of the issue's 5 MB bodies at once (each 2.56M prompt tokens x n 16) get 400 naming the
// limit; they used to be accepted as 2 x 1,024 sequences with private prompt copies (+0.9 GB).
TEST(HostileRequestCost, TheIssues5MBBodyGets400AndMemoryStaysBounded) {
  TestServer ts({}, long_context_engine());
  const std::string body = amplifying_body(64, 16, false);
  ASSERT_GT(body.size(), 5000000u);
  ASSERT_LT(body.size(), 8u << 20);
  http_post(ts.port, "/v1/completions", json{{"prompt", "warm"}, {"max_tokens", 2}}.dump());
  const size_t idle = rss_bytes();
  std::atomic<int> refused{0};
  std::string last;
  const size_t peak = peak_rss_during([&] {
    std::vector<std::thread> clients;
    for (int i = 0; i < 2; ++i)
      clients.emplace_back([&] {
        const HttpResult r = http_post(ts.port, "/v1/completions", body);
        if (r.status == 400 && error_message(r).find("--max-request-prompt-tokens") != std::string::npos) ++refused;
        else last = r.body.substr(0, 300);
      });
    for (std::thread& t : clients) t.join();
  });
  EXPECT_EQ(refused, 2) << last;
  // The bodies (client and server side) and their parse (a JSON DOM of 2.56M numbers, ~100 MB) are the
  // whole cost; the sequences used to add 2 x 164 MB of prompt copies.
  expect_peak_below(idle, peak, 288 * kMiB);
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_num_requests_waiting", 0, 5), 0);
}

// Heap bytes in use (glibc's counters, every arena); 0 under ASan, whose allocator keeps its own.
size_t heap_in_use() {
  if (!rss_is_meaningful()) return 0;
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Item 4: with the limits raised so that such a body is accepted (half of it here: 32 prompts of 40K tokens,
// n 16), its 512 waiting sequences share the 32 prompts (one copy each, 5 MB) instead of holding 512
// private copies (82 MB). Measured as live heap bytes once they are queued (the parse has come and gone).
TEST(HostileRequestCost, SequencesOfAPromptShareItsTokens) {
  server::ServerConfig cfg;
  cfg.max_concurrent_requests = 2048;
  cfg.limits.max_request_prompt_tokens = int64_t{1} << 26;
  cfg.limits.max_request_output_tokens = int64_t{1} << 26;
  TestServer ts(cfg, long_context_engine());
  const std::string body = amplifying_body(32, 16, true);
  http_post(ts.port, "/v1/completions", json{{"prompt", "warm"}, {"max_tokens", 2}}.dump());
  const size_t idle = heap_in_use();
  size_t queued = 0;
  {
    RawConn c(ts.port);
    ASSERT_TRUE(c.send_all(raw_post("/v1/completions", body)));
    std::string bytes;
    ASSERT_TRUE(wait_for_head(c, bytes, 30)) << bytes.substr(0, 300);  // all 512 are in the engine
    EXPECT_GE(wait_metric(ts.port, "nanovllm_num_requests_waiting", 511, 10), 511);
    queued = heap_in_use();
  }  // the client leaves: every sequence is aborted
  if (rss_is_meaningful()) {
    std::printf("live heap: idle %zu MiB, 512 sequences queued %zu MiB\n", idle / kMiB, queued / kMiB);
    // The prompts (5 MB), their block hashes (10 MB) and the request body still on its way out.
    EXPECT_LT(queued, idle + 48 * kMiB);
  }
  // Aborts land between engine steps: the step running when the client left (a long prefill, slow under ASan
  // on two busy cores) finishes first.
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_http_requests_in_flight", 0, 60), 0);
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_num_requests_waiting", 0, 60), 0);
}

// Item 4: concurrency is counted in sequences (prompts x n), not HTTP requests. At a limit of 4, a request
// of 5 sequences can never run (400 naming the limit); with 3 running, one of 2 waits (429), one of 1 fits.
TEST(HostileRequestCost, ConcurrencyIsCountedInSequences) {
  server::ServerConfig cfg;
  cfg.max_concurrent_requests = 4;
  TestServer ts(cfg);
  const HttpResult five = http_post(ts.port, "/v1/completions", json{{"prompt", "x"}, {"n", 5}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(five.status, 400) << five.body;
  EXPECT_NE(error_message(five).find("--max-concurrent-requests"), std::string::npos) << five.body;

  RawConn running(ts.port);
  ASSERT_TRUE(running.send_all(raw_post(
      "/v1/completions",
      json{{"prompt", "long"}, {"n", 3}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}}.dump())));
  std::string bytes;
  ASSERT_TRUE(wait_for_head(running, bytes, 30)) << bytes;
  const HttpResult two = http_post(ts.port, "/v1/completions", json{{"prompt", "x"}, {"n", 2}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(two.status, 429) << two.body;
  const HttpResult one = http_post(ts.port, "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(one.status, 200) << one.body;
  running.close();
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_http_requests_in_flight", 0, 10), 0);
  const HttpResult four = http_post(ts.port, "/v1/completions", json{{"prompt", "x"}, {"n", 4}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(four.status, 200) << four.body;
}

// Item 4: prompt tokens x n and max_tokens x n are capped per request, each 400 naming its limit; a request
// that leaves max_tokens out gets its share of the output limit instead of a refusal.
TEST(HostileRequestCost, PerRequestTokenLimitsNameThemselves) {
  server::ServerConfig cfg;
  cfg.limits.max_request_prompt_tokens = 100;
  cfg.limits.max_request_output_tokens = 80;
  TestServer ts(cfg);
  const std::vector<int32_t> sixty(60, 7);
  const HttpResult prompt = http_post(ts.port, "/v1/completions", json{{"prompt", sixty}, {"n", 2}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(prompt.status, 400) << prompt.body;
  EXPECT_NE(error_message(prompt).find("--max-request-prompt-tokens"), std::string::npos) << prompt.body;
  EXPECT_EQ(http_post(ts.port, "/v1/completions", json{{"prompt", sixty}, {"max_tokens", 2}}.dump()).status, 200);

  const HttpResult output = http_post(ts.port, "/v1/completions", json{{"prompt", "x"}, {"n", 8}, {"max_tokens", 200}}.dump());
  EXPECT_EQ(output.status, 400) << output.body;
  EXPECT_NE(error_message(output).find("--max-request-output-tokens"), std::string::npos) << output.body;
  // Logprobs count: 5 tokens x (1 + 20 listed) is past 80.
  const HttpResult listed = http_post(ts.port, "/v1/completions",
                                      json{{"prompt", "x"}, {"logprobs", 20}, {"max_tokens", 5}}.dump());
  EXPECT_EQ(listed.status, 400) << listed.body;
  EXPECT_NE(error_message(listed).find("top logprobs"), std::string::npos) << listed.body;

  // Chat without max_tokens defaults to the rest of the context (~240 here): 8 choices get 80 / 8 each.
  const HttpResult chat = http_post(
      ts.port, "/v1/chat/completions",
      json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"n", 8}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json["usage"]["completion_tokens"], 80);
}

// Item 8: user numbers are checked before any arithmetic: max_tokens near 2^63 got "you requested
// -9223372036854775808 tokens"; now the sum is printed as it is.
TEST(HostileRequestCost, HugeNumbersAreRefusedWithTheirValues) {
  TestServer ts;
  const HttpResult r = http_post(
      ts.port, "/v1/completions",
      R"({"prompt": [1, 2, 3], "max_tokens": 9223372036854775807})");
  EXPECT_EQ(r.status, 400) << r.body;
  // 2^63 - 1 + 3 = 9223372036854775810.
  EXPECT_NE(error_message(r).find("you requested 9223372036854775810 tokens"), std::string::npos) << r.body;
  for (const char* field : {"n", "logprobs", "top_k", "min_tokens", "max_tokens"}) {
    for (const char* value : {"9223372036854775807", "18446744073709551615", "-9223372036854775808"}) {
      SCOPED_TRACE(std::string(field) + " = " + value);
      const HttpResult h = http_post(ts.port, "/v1/completions",
                                     std::string(R"({"prompt": "x", ")") + field + "\": " + value + "}");
      EXPECT_EQ(h.status, 400) << h.body;
      if (value[0] != '-') {
        EXPECT_EQ(error_message(h).find("-92233720368547758"), std::string::npos) << h.body;
      }
    }
  }
  EXPECT_EQ(http_post(ts.port, "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "seed": 18446744073709551615})")
                .status,
            200);
}

// Item 5: a long prefill does not starve short requests. 8 prompts of 2,048 tokens (128 steps of a
// 128-token budget) are prefilling when an 8-token request arrives: it is answered while most of them still
// are, where FCFS made it wait for all 8 (the CPU-backend numbers at 8 x 40K are in docs/server.md).
TEST(HostileRequestCost, ShortRequestsAreNotStarvedByALongPrefill) {
  EngineConfig ec = server_engine_config();
  ec.model.max_model_len = 4096;
  ec.cache.num_kv_blocks = 8 * 2048 / 16 + 64;
  ec.scheduler.max_num_batched_tokens = 128;
  TestServer ts({}, ec);
  std::vector<std::vector<int32_t>> prompts(8, std::vector<int32_t>(2048));
  for (size_t p = 0; p < prompts.size(); ++p)
    for (size_t i = 0; i < prompts[p].size(); ++i) prompts[p][i] = static_cast<int32_t>(100 + (p * 7919 + i * 31) % 50000);
  RawConn long_request(ts.port);
  ASSERT_TRUE(long_request.send_all(raw_post(
      "/v1/completions",
      R"({"prompt": )" + prompt_lists_json(prompts) + R"(, "max_tokens": 1, "ignore_eos": true, "stream": true})")));
  std::string bytes;
  ASSERT_TRUE(wait_for_head(long_request, bytes, 30)) << bytes.substr(0, 300);  // all 8 are in the engine
  const auto t0 = Clock::now();
  const HttpResult short_request =
      http_post(ts.port, "/v1/completions", json{{"prompt", std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}},
                                                 {"max_tokens", 1}}.dump());
  const double short_s = seconds_since(t0);
  EXPECT_EQ(short_request.status, 200) << short_request.body;
  bytes += long_request.read_until_close(0.05);
  size_t prefilled = 0;  // long prompts done (max_tokens 1: a prompt's finish comes with its prefill)
  for (size_t at = 0; (at = bytes.find("\"finish_reason\":\"length\"", at)) != std::string::npos; ++at) ++prefilled;
  std::printf("short request: %.3f s, with %zu of 8 long prompts prefilled\n", short_s, prefilled);
  EXPECT_LE(prefilled, 4u) << "the short request waited for the long prefill";
  long_request.close();
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_num_requests_running", 0, 10), 0);
}

// Item 6: logprobs cost what is still to be sent. 8 choices x 200 tokens x 20 top logprobs through the
// response builder: a stream used to keep every token's entries as JSON to its end (~10 KB a token, 16 MB
// here), a whole response its JSON DOM twice. Now a stream keeps nothing of what it sent and a whole
// response 8 bytes an entry until it writes its text, which still says everything.
TEST(HostileRequestCost, LogprobsAreNotHoarded) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_model_dir(server_model_dir());
  constexpr int kChoices = 8, kSteps = 200, kTop = 20;
  for (const server::Endpoint ep : {server::Endpoint::kChat, server::Endpoint::kCompletions}) {
    for (const bool stream : {true, false}) {
      const bool chat = ep == server::Endpoint::kChat;
      SCOPED_TRACE(std::string(chat ? "chat" : "completions") + (stream ? ", stream" : ", whole"));
      server::GenerationRequest req;
      req.endpoint = ep;
      req.model = "m";
      req.prompts = {{1, 2, 3}};
      req.n = kChoices;
      req.stream = stream;
      req.want_logprobs = true;
      req.top_logprobs = kTop;
      std::mt19937 rng(7);
      std::vector<std::vector<int32_t>> sampled(kChoices);
      const size_t before = heap_in_use();
      server::ResponseBuilder builder(req, tok, "cmpl-1", 0);
      size_t sent = 0;
      if (stream)
        for (const json& c : builder.start_chunks()) sent += server::dump_json(c).size();
      for (int step = 0; step < kSteps; ++step) {
        std::vector<server::ChoiceEvent> events(kChoices);
        for (int i = 0; i < kChoices; ++i) {
          server::ChoiceEvent& e = events[static_cast<size_t>(i)];
          const auto token = static_cast<int32_t>(rng() % 150000);
          sampled[static_cast<size_t>(i)].push_back(token);
          e.index = i;
          e.text = "x";
          e.token_ids = {token};
          std::vector<TokenLogprob> lps;
          for (int k = 0; k < kTop; ++k) lps.push_back({static_cast<int64_t>(rng() % 150000), -0.25f * static_cast<float>(k + 1)});
          lps.push_back({token, -1.5f});  // the sampled token, below the top list
          e.logprobs = {lps};
          e.finished = step == kSteps - 1;
          e.finish_reason = e.finished ? FinishReason::kLength : FinishReason::kNone;
        }
        if (stream) {
          for (const json& c : builder.chunks(events)) sent += server::dump_json(c).size();
        } else {
          builder.add(events);
        }
      }
      const size_t kept = heap_in_use() - std::min(before, heap_in_use());
      if (stream) {
        EXPECT_GT(sent, size_t{kChoices} * kSteps * kTop * 20);  // the entries went out
        EXPECT_LT(kept, size_t{64} << 10) << "a stream kept what it had sent";
        continue;
      }
      EXPECT_LT(kept, size_t{1} << 20) << "logprobs kept as JSON";
      const json r = json::parse(builder.final_response());
      ASSERT_EQ(r["choices"].size(), size_t{kChoices});
      EXPECT_EQ(r["usage"]["completion_tokens"], kChoices * kSteps);
      for (int i = 0; i < kChoices; ++i) {
        const json& c = r["choices"][static_cast<size_t>(i)];
        EXPECT_EQ(c["index"], i);
        EXPECT_EQ(c["finish_reason"], "length");
        const json& lp = c["logprobs"];
        if (chat) {
          EXPECT_EQ(c["message"]["content"], std::string(kSteps, 'x'));
          ASSERT_EQ(lp["content"].size(), size_t{kSteps});
          const json& last = lp["content"][kSteps - 1];
          EXPECT_EQ(last["token"], server::token_display(tok, sampled[static_cast<size_t>(i)].back()));
          EXPECT_FLOAT_EQ(last["logprob"].get<float>(), -1.5f);
          EXPECT_EQ(last["top_logprobs"].size(), size_t{kTop});
        } else {
          EXPECT_EQ(c["text"], std::string(kSteps, 'x'));
          ASSERT_EQ(lp["tokens"].size(), size_t{kSteps});
          ASSERT_EQ(lp["text_offset"].size(), size_t{kSteps});
          EXPECT_EQ(lp["text_offset"][kSteps - 1], kSteps - 1);
          EXPECT_FLOAT_EQ(lp["token_logprobs"][kSteps - 1].get<float>(), -1.5f);
          EXPECT_GE(lp["top_logprobs"][kSteps - 1].size(), size_t{kTop - 2});  // display strings may repeat
        }
      }
    }
  }
}

// Item 7: an empty API key (an unset variable) is an error, not a server without auth; serving beyond
// loopback without a key is warned about.
TEST(HostileRequestCost, EmptyApiKeyIsAnErrorAndOpenServersAreWarnedAbout) {
  LLMEngine engine(server_engine_config());
  server::ServerConfig cfg;
  cfg.api_key = "";
  try {
    server::Server s(engine, cfg);
    FAIL() << "a server with an empty API key was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("API key is empty"), std::string::npos) << e.what();
  }
  server::ServerConfig open;
  open.host = "0.0.0.0";
  EXPECT_NE(server::exposure_warning(open).find("without an API key"), std::string::npos);
  open.host = "::";
  EXPECT_NE(server::exposure_warning(open), "");
  open.api_key = "k";
  EXPECT_EQ(server::exposure_warning(open), "");
  for (const char* host : {"127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"}) {
    server::ServerConfig local;
    local.host = host;
    EXPECT_EQ(server::exposure_warning(local), "") << host;
  }
}

}  // namespace
}  // namespace nanovllm::testing
