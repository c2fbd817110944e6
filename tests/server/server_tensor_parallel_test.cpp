// The server on a tensor-parallel engine (issue #34): ranks as threads, and a group of two nodes whose second
// node is `LLMEngine::run_worker` on a thread talking TCP over loopback, as on another host. Completions,
// streamed and not, carry the unsplit engine's greedy text; stopping the server ends the worker cleanly.
#include <gtest/gtest.h>

#include <thread>

#include "nanovllm/parallel/tcp.h"
#include "server/server_test_util.h"
#include "support/test_models.h"

namespace nanovllm::testing {
namespace {

using nlohmann::json;

std::string completion_text(int port, const std::string& prompt, bool stream) {
  const json body{{"model", server_model_dir().filename().string()}, {"prompt", prompt}, {"max_tokens", 10},
                  {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}};
  if (!stream) {
    const HttpResult r = http_post(port, "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json.is_null() ? std::string() : r.json["choices"][0]["text"].get<std::string>();
  }
  const Stream s = post_stream(port, "/v1/completions", body);
  EXPECT_TRUE(s.done) << s.body;
  std::string text;
  for (const json& c : s.chunks)
    for (const json& ch : c["choices"]) text += ch["text"].get<std::string>();
  return text;
}

// Serves `prompts` from an engine of `config` (node 0 of its group) and returns the completions' texts.
std::vector<std::string> serve(const EngineConfig& config, const std::vector<std::string>& prompts) {
  LLMEngine engine(config);
  server::ServerConfig sc;
  sc.port = 0;
  server::Server server(engine, sc);
  const int port = server.start();
  std::vector<std::string> texts;
  for (const std::string& p : prompts) {
    texts.push_back(completion_text(port, p, false));
    texts.push_back(completion_text(port, p, true));
  }
  return texts;
}

TEST(ServerTensorParallel, SplitEnginesServeTheUnsplitCompletions) {
  const std::vector<std::string> prompts = {"The capital of France is", "1, 2, 3, 4,"};
  EngineConfig ec = server_engine_config();
  std::vector<std::string> want;
  {
    LLM llm(ec);
    SamplingParams p = greedy(10);
    p.ignore_eos = true;
    for (const std::string& prompt : prompts) {
      const std::string text = llm.generate(std::vector<std::string>{prompt}, p).at(0).text;
      want.push_back(text);
      want.push_back(text);  // streamed
    }
  }
  ASSERT_FALSE(want[0].empty());
  ec.parallel.tensor_parallel_size = 2;
  EXPECT_EQ(serve(ec, prompts), want) << "TP2, one process";

  ec.parallel.nnodes = 2;
  ec.parallel.dist_init_addr = "127.0.0.1:" + std::to_string(Listener("127.0.0.1", 0).port());
  std::string worker_error = "not run";
  std::thread worker([&] {
    EngineConfig w = ec;
    w.parallel.node_rank = 1;
    try {
      LLMEngine::run_worker(w);
      worker_error.clear();
    } catch (const std::exception& e) {
      worker_error = e.what();
    }
  });
  EXPECT_EQ(serve(ec, prompts), want) << "TP2 over two nodes";
  worker.join();
  EXPECT_EQ(worker_error, "");
}

}  // namespace
}  // namespace nanovllm::testing
