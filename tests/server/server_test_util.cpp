#include "server/server_test_util.h"

#include <chrono>
#include <thread>

#include "nanovllm/server/http_client.h"
#include "support/test_models.h"

namespace nanovllm::testing {

std::filesystem::path server_model_dir() {
  // eos: the tokenizer's <|im_end|>, as `make-test-model --tokenizer` sets it.
  return tiny_model_dir("server", {{"vocab_size", 151936}, {"tie_word_embeddings", false}, {"eos_token_id", 151645}},
                        21, /*qwen3_tokenizer=*/true);
}

EngineConfig server_engine_config() {
  EngineConfig c;
  c.model.path = server_model_dir();
  c.model.backend = Backend::kCpu;
  c.cache.num_kv_blocks = 512;
  c.cache.block_size = 16;
  c.model.max_model_len = 256;
  c.scheduler.max_num_seqs = 128;
  c.scheduler.max_num_batched_tokens = 2048;
  return c;
}

TestServer::TestServer(server::ServerConfig config) : TestServer(std::move(config), server_engine_config()) {}

TestServer::TestServer(server::ServerConfig config, const EngineConfig& engine_config) {
  engine = std::make_unique<LLMEngine>(engine_config);
  config.port = 0;
  api_key = config.api_key.value_or("");
  server = std::make_unique<server::Server>(*engine, config);
  port = server->start();
}

TestServer::~TestServer() {
  server.reset();  // shuts down before the engine goes
  engine.reset();
}

namespace {

HttpResult fetch(int port, server::HttpClientRequest req, const std::string& api_key) {
  if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
  const server::HttpClientResponse r = server::http_fetch("127.0.0.1", port, req, std::chrono::seconds(60));
  HttpResult out;
  out.status = r.status;
  out.body = r.body;
  out.json = nlohmann::json::parse(out.body, nullptr, /*allow_exceptions=*/false);
  if (out.json.is_discarded()) out.json = nullptr;
  return out;
}

}  // namespace

HttpResult http_get(int port, const std::string& path, const std::string& api_key) {
  server::HttpClientRequest req;
  req.target = path;
  return fetch(port, std::move(req), api_key);
}

HttpResult http_post(int port, const std::string& path, const std::string& body, const std::string& api_key,
                     const std::string& content_type) {
  server::HttpClientRequest req;
  req.method = "POST";
  req.target = path;
  req.body = body;
  req.headers.emplace_back("Content-Type", content_type);
  return fetch(port, std::move(req), api_key);
}

double metric(int port, const std::string& name) {
  const HttpResult r = http_get(port, "/metrics");
  size_t pos = 0;
  while ((pos = r.body.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || r.body[pos - 1] == '\n';
    const char next = pos + name.size() < r.body.size() ? r.body[pos + name.size()] : '\0';
    if (line_start && (next == ' ' || next == '{')) {
      const size_t sp = r.body.find(' ', r.body.find_first_of(" }", pos));
      return std::stod(r.body.substr(sp + 1, r.body.find('\n', sp) - sp - 1));
    }
    pos += name.size();
  }
  return -1;
}

double wait_metric(int port, const std::string& name, double value, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  double v = metric(port, name);
  while (v != value && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    v = metric(port, name);
  }
  return v;
}

Stream post_stream(int port, const std::string& path, const nlohmann::json& body, const std::string& api_key) {
  const server::SseResult r = server::post_sse("127.0.0.1", port, path, body.dump(), {}, api_key);
  Stream s;
  s.status = r.status;
  s.done = r.done;
  s.body = r.body;
  for (const std::string& e : r.events) s.chunks.push_back(nlohmann::json::parse(e));
  return s;
}

}  // namespace nanovllm::testing
