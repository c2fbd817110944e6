// A client that disconnects while a non-streamed request is running: the request is cancelled and its KV
// blocks come back (the streamed case is covered by the load test).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

// Sends one HTTP request on a fresh loopback connection and closes it without reading the answer.
void send_and_hang_up(int port, const std::string& path, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  ::close(fd);
}

TEST(ServerDisconnect, NonStreamedRequestIsCancelledWhenTheClientLeaves) {
  TestServer ts;
  constexpr int kMaxTokens = 240;  // the test model's max_model_len is 256
  const nlohmann::json body = {{"prompt", std::vector<int32_t>{1000, 2000, 3000}}, {"max_tokens", kMaxTokens},
                               {"temperature", 0}, {"ignore_eos", true}, {"n", 8}};
  send_and_hang_up(ts.port, "/v1/completions", body.dump());
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_client_disconnects_total", 1), 1);
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_kv_blocks_used", 0), 0);
  EXPECT_EQ(wait_metric(ts.port, "nanovllm_http_requests_in_flight", 0), 0);
  EXPECT_LT(metric(ts.port, "nanovllm_generation_tokens_total"), 8 * kMaxTokens);  // stopped early
  // The server keeps serving.
  const HttpResult ok = http_post(ts.port, "/v1/completions",
                                  nlohmann::json{{"prompt", "hello"}, {"max_tokens", 4}, {"temperature", 0}}.dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace nanovllm::testing
