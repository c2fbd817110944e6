// Shared by the server tests: the tiny random Qwen3 with the real Qwen3 tokenizer (vocab 151936, hidden 64 —
// the model the text e2e tests use), an engine config small enough for CI, a server on a free loopback port,
// and a JSON client.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/llm/llm.h"
#include "nanovllm/server/server.h"
#include "nanovllm/server/sse_client.h"

namespace nanovllm::testing {

std::filesystem::path server_model_dir();
EngineConfig server_engine_config();  // CPU, 512 KV blocks of 16, max_model_len 256

struct TestServer {
  std::unique_ptr<LLMEngine> engine;
  std::unique_ptr<server::Server> server;
  int port = 0;
  std::string api_key;

  explicit TestServer(server::ServerConfig config = {});
  TestServer(server::ServerConfig config, const EngineConfig& engine_config);
  ~TestServer();
};

struct HttpResult {
  int status = 0;  // 0: no response
  std::string body;
  nlohmann::json json;  // parsed body (null when not JSON)
};
HttpResult http_get(int port, const std::string& path, const std::string& api_key = "");
HttpResult http_post(int port, const std::string& path, const std::string& body, const std::string& api_key = "",
                     const std::string& content_type = "application/json");
// A metric's value from /metrics (first sample of that name), or -1.
double metric(int port, const std::string& name);
// Polls /metrics until `name` equals `value` (the engine thread publishes after each step) or `timeout_s`
// passes; returns the last value seen.
double wait_metric(int port, const std::string& name, double value, double timeout_s = 10);

// A stream's chunks parsed, with [DONE] checked.
struct Stream {
  int status = 0;
  bool done = false;
  std::vector<nlohmann::json> chunks;
  std::string body;
};
Stream post_stream(int port, const std::string& path, const nlohmann::json& body, const std::string& api_key = "");

}  // namespace nanovllm::testing
