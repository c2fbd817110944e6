// Hostile HTTP framing (issue problems 2, 3, 5, 7): chunked bodies past the body limit, header and
// request-line floods (before the API key is checked), Range amplification on /metrics, pipelined
// requests, HTTP/1.0 clients, and conflicting or invalid Content-Length / Transfer-Encoding. Each case
// checks the answer, that /health stays fast, and that resident memory stays bounded and comes back.
// Round two (issue 45, item 10): absolute-form targets and HEAD, as RFC 9112 / 9110 say.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "server/raw_http.h"
#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

constexpr const char* kKey = "sk-hostile";
constexpr size_t kMiB = 1u << 20;
// Memory bound: what a flood may add while it runs (the body limit times the attackers, plus header buffers
// and slack for the allocator). After it, RSS must come back within kRssAfterSlack of its idle value.
constexpr size_t kPeakSlack = 48 * kMiB;

class HostileHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::ServerConfig cfg;
    cfg.api_key = kKey;
    cfg.max_body_bytes = 1 * kMiB;
    server_ = new TestServer(cfg);
    // Warm up every path once so the allocator's arenas and the server's threads exist before "idle".
    http_post(port(), "/v1/completions", json{{"prompt", "warm"}, {"max_tokens", 2}}.dump(), kKey);
    http_get(port(), "/metrics");
    idle_rss_ = rss_bytes();
  }
  static void TearDownTestSuite() { delete server_; }
  static int port() { return server_->port; }

  template <typename F>
  static void expect_bounded_memory(F&& flood) {
    nanovllm::testing::expect_bounded_memory(idle_rss_, kPeakSlack, flood);
  }

  static void expect_fast_health() {
    const double ms = health_ms(port());
    EXPECT_GE(ms, 0);
    EXPECT_LT(ms, 1000 * timing_scale());
  }

  static TestServer* server_;
  static size_t idle_rss_;
};
TestServer* HostileHttp::server_ = nullptr;
size_t HostileHttp::idle_rss_ = 0;

// Problem 2: four clients each stream a 64 MiB chunked body at a 1 MiB limit. Each gets 413 (or is cut
// off after it) long before its body is in memory.
TEST_F(HostileHttp, ChunkedBodiesPastTheLimitGet413) {
  constexpr int kClients = 4;
  constexpr size_t kChunk = 64 * 1024, kTotal = 64 * kMiB;
  std::atomic<int> got_413{0}, accepted_all{0};
  expect_bounded_memory([&] {
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&] {
        RawConn c(port());
        std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kKey) +
                           "\r\nTransfer-Encoding: chunked\r\n\r\n";
        if (!c.send_all(head)) return;
        char size_line[32];
        std::snprintf(size_line, sizeof(size_line), "%zx\r\n", kChunk);
        const std::string chunk = size_line + std::string(kChunk, ' ') + "\r\n";
        size_t sent = 0;
        while (sent < kTotal && c.send_all(chunk, 5)) sent += kChunk;
        if (sent >= kTotal) accepted_all += c.send_all("0\r\n\r\n") ? 1 : 0;
        const auto rs = parse_responses(c.read_until_close(5));
        if (!rs.empty() && rs[0].status == 413) ++got_413;
      });
    for (std::thread& t : clients) t.join();
  });
  EXPECT_EQ(accepted_all, 0) << "the server read a whole 64 MiB chunked body";
  EXPECT_EQ(got_413, kClients);
  expect_fast_health();
}

// Problem 3: header floods are cut off at the header limit, before the API key is looked at.
TEST_F(HostileHttp, HeaderFloodsAreCutOffBeforeTheKeyCheck) {
  expect_bounded_memory([&] {
    {  // a 1 MiB request target
      RawConn c(port());
      c.send_all("GET /" + std::string(kMiB, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 5);
      const auto rs = parse_responses(c.read_until_close(5));
      ASSERT_FALSE(rs.empty());
      EXPECT_TRUE(rs[0].status == 414 || rs[0].status == 431) << rs[0].status;
    }
    {  // 20,000 small header fields
      RawConn c(port());
      std::string req = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
      for (int i = 0; i < 20000; ++i) req += "X-Flood-" + std::to_string(i) + ": y\r\n";
      c.send_all(req + "\r\n", 5);
      const auto rs = parse_responses(c.read_until_close(5));
      ASSERT_FALSE(rs.empty());
      EXPECT_EQ(rs[0].status, 431);
    }
    {  // 150 header fields: under the byte limit, over the count limit
      RawConn c(port());
      std::string req = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
      for (int i = 0; i < 150; ++i) req += "X-" + std::to_string(i) + ": y\r\n";
      c.send_all(req + "\r\n", 5);
      const auto rs = parse_responses(c.read_until_close(5));
      ASSERT_FALSE(rs.empty());
      EXPECT_EQ(rs[0].status, 431);
    }
    {  // an endless header, 4 connections at once: each is closed after a bounded amount
      std::vector<std::thread> floods;
      std::atomic<int> cut_off{0};
      for (int i = 0; i < 4; ++i)
        floods.emplace_back([&] {
          RawConn c(port());
          c.send_all("GET /v1/models HTTP/1.1\r\nHost: x\r\n");
          const std::string line = "X-Flood: " + std::string(1000, 'z') + "\r\n";
          std::string block;
          for (int k = 0; k < 64; ++k) block += line;
          size_t sent = 0;
          while (sent < 64 * kMiB && c.send_all(block, 5)) sent += block.size();
          if (sent < 64 * kMiB) ++cut_off;
        });
      for (std::thread& t : floods) t.join();
      EXPECT_EQ(cut_off, 4);
    }
  });
  expect_fast_health();
}

// Problem 5: /metrics (open without the key) ignores Range: no 206, no multipart amplification.
TEST_F(HostileHttp, RangeRequestsOnMetricsAreIgnored) {
  const HttpResult plain = http_get(port(), "/metrics");
  ASSERT_EQ(plain.status, 200);
  std::string ranges = "bytes=0-";
  while (ranges.size() < 7000) ranges += ",0-";
  RawConn c(port());
  ASSERT_TRUE(c.send_all("GET /metrics HTTP/1.1\r\nHost: x\r\nRange: " + ranges + "\r\nConnection: close\r\n\r\n"));
  const std::string bytes = c.read_until_close(10, 64 * kMiB);
  const auto rs = parse_responses(bytes);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, 200);
  EXPECT_LT(bytes.size(), plain.body.size() + 4096);
  expect_fast_health();
}

// Problem 7: three pipelined requests in one write get three answers, in order.
TEST_F(HostileHttp, PipelinedRequestsAreAllAnswered) {
  const std::string auth = "Authorization: Bearer " + std::string(kKey) + "\r\n";
  const std::string body = json{{"prompt", "pipe"}, {"max_tokens", 2}}.dump();
  RawConn c(port());
  ASSERT_TRUE(c.send_all("GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + raw_post("/v1/completions", body, auth) +
                         "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"));
  const auto rs = parse_responses(c.read_responses(3, 30), false);
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].status, 200);
  EXPECT_EQ(rs[0].body, "{\"status\":\"ok\"}");
  EXPECT_EQ(rs[1].status, 200);
  EXPECT_EQ(json::parse(rs[1].body)["object"], "text_completion");
  EXPECT_EQ(rs[2].status, 200);
  EXPECT_EQ(json::parse(rs[2].body)["object"], "list");
}

// Problem 7: an HTTP/1.0 client gets an HTTP/1.0 answer: never chunked; a stream ends with the connection.
TEST_F(HostileHttp, Http10ClientsGetPlainBodies) {
  const std::string auth = "Authorization: Bearer " + std::string(kKey) + "\r\n";
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "whole");
    const std::string body = json{{"prompt", "old"}, {"max_tokens", 3}, {"stream", stream}}.dump();
    RawConn c(port());
    ASSERT_TRUE(c.send_all("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n" + auth +
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    const std::string bytes = c.read_until_close(30);
    const auto rs = parse_responses(bytes);
    ASSERT_EQ(rs.size(), 1u) << bytes;
    EXPECT_EQ(rs[0].status, 200);
    EXPECT_FALSE(rs[0].chunked) << bytes;
    EXPECT_EQ(rs[0].headers.count("transfer-encoding"), 0u);
    if (stream) EXPECT_NE(rs[0].body.find("data: [DONE]"), std::string::npos) << bytes;
    else EXPECT_EQ(json::parse(rs[0].body)["object"], "text_completion");
  }
}

// Problem 7: a request whose length is ambiguous is refused and the connection closed, so nothing after it
// is read as a request of its own (no smuggling).
TEST_F(HostileHttp, AmbiguousBodyLengthsAreRefused) {
  const std::string auth = "Authorization: Bearer " + std::string(kKey) + "\r\n";
  const std::string body = json{{"prompt", "x"}, {"max_tokens", 1}}.dump();
  const std::string n = std::to_string(body.size());
  struct Case {
    const char* name;
    std::string headers;
    int status;
  };
  const std::vector<Case> cases = {
      {"two different lengths", "Content-Length: " + n + "\r\nContent-Length: 3\r\n", 400},
      {"negative length", "Content-Length: -" + n + "\r\n", 400},
      {"length and chunked", "Content-Length: " + n + "\r\nTransfer-Encoding: chunked\r\n", 400},
      {"chunked and length", "Transfer-Encoding: chunked\r\nContent-Length: " + n + "\r\n", 400},
      {"length with garbage", "Content-Length: 1x\r\n", 400},
      {"unknown transfer coding", "Transfer-Encoding: gzip\r\n", 501},  // RFC 9112 6.1
      {"gzip, then chunked", "Transfer-Encoding: gzip, chunked\r\n", 501},
  };
  for (const auto& [name, headers, status] : cases) {
    SCOPED_TRACE(name);
    RawConn c(port());
    ASSERT_TRUE(c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + headers + "\r\n" + body +
                           "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    const auto rs = parse_responses(c.read_until_close(10));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].status, status);
  }
  // The same length twice is fine (RFC 9110 allows repeating it).
  RawConn c(port());
  ASSERT_TRUE(c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: " + n +
                         "\r\nContent-Length: " + n + "\r\nConnection: close\r\n\r\n" + body));
  const auto rs = parse_responses(c.read_until_close(30));
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, 200) << rs[0].body;
  expect_fast_health();
}

// Round two (issue 45, item 10): RFC 9112 3.2.2 — a server accepts a request target in absolute form
// ("http://host:port/path") as it does the origin form (they got 404).
TEST_F(HostileHttp, AbsoluteFormTargetsAreServed) {
  const std::string auth = "Authorization: Bearer " + std::string(kKey) + "\r\n";
  const std::string base = "http://127.0.0.1:" + std::to_string(port());
  RawConn c(port());
  ASSERT_TRUE(c.send_all("GET " + base + "/health HTTP/1.1\r\nHost: x\r\n\r\n" +
                         "GET HTTP://127.0.0.1/v1/models?x=1 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n" +
                         raw_post(base + "/v1/completions", json{{"prompt", "abs"}, {"max_tokens", 2}}.dump(), auth) +
                         "GET " + base + " HTTP/1.1\r\nHost: x\r\n\r\n"));  // an empty path is "/"
  const auto rs = parse_responses(c.read_responses(4, 30), false);
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0].status, 200);
  EXPECT_EQ(rs[0].body, "{\"status\":\"ok\"}");
  EXPECT_EQ(rs[1].status, 200) << rs[1].body;
  EXPECT_EQ(rs[2].status, 200) << rs[2].body;
  EXPECT_EQ(rs[3].status, 404);
}

// Round two (item 10): RFC 9110 9.3.2 — HEAD is served wherever GET is, with GET's header (Content-Length
// included) and no body (it got 405); on a POST-only route its 405 has no body either.
TEST_F(HostileHttp, HeadGetsTheHeaderOfGetAndNoBody) {
  const std::string auth = "Authorization: Bearer " + std::string(kKey) + "\r\n";
  for (const char* path : {"/health", "/v1/models"}) {
    SCOPED_TRACE(path);
    const HttpResult get = http_get(port(), path, kKey);
    ASSERT_EQ(get.status, 200);
    RawConn c(port());
    // Two HEADs and a GET on one connection: the next response must start right after each header.
    const std::string head = std::string("HEAD ") + path + " HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n";
    ASSERT_TRUE(c.send_all(head + head + std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n" + auth +
                           "Connection: close\r\n\r\n"));
    const std::string bytes = c.read_until_close(10);
    const size_t first_end = bytes.find("\r\n\r\n");
    ASSERT_NE(first_end, std::string::npos) << bytes;
    const std::string first = bytes.substr(0, first_end);
    EXPECT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
    EXPECT_NE(first.find("Content-Length: " + std::to_string(get.body.size())), std::string::npos) << first;
    EXPECT_EQ(bytes.compare(first_end + 4, 12, "HTTP/1.1 200"), 0) << bytes;  // no body in between
    const size_t second_end = bytes.find("\r\n\r\n", first_end + 4);
    ASSERT_NE(second_end, std::string::npos);
    const auto rest = parse_responses(std::string_view(bytes).substr(second_end + 4));
    ASSERT_EQ(rest.size(), 1u) << bytes;
    EXPECT_EQ(rest[0].status, 200);
    EXPECT_EQ(rest[0].body, get.body);
  }
  RawConn c(port());
  ASSERT_TRUE(c.send_all("HEAD /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Connection: close\r\n\r\n"));
  const std::string bytes = c.read_until_close(10);
  EXPECT_EQ(bytes.rfind("HTTP/1.1 405", 0), 0u) << bytes;
  EXPECT_NE(bytes.find("Allow: POST"), std::string::npos) << bytes;
  EXPECT_EQ(bytes.find("\r\n\r\n") + 4, bytes.size()) << "a body after the header: " << bytes;
}

}  // namespace
}  // namespace nanovllm::testing
