// A tensor-parallel group spread over nodes (docs/tensor_parallel.md, section 7) on the CPU backend: node
// 0's engine on the test thread, every other node's `LLMEngine::run_worker` on a thread of its own, all
// talking over TCP on loopback exactly as separate hosts do (cli_test runs it as separate processes). The
// group gives the unsplit model's tokens and logprobs — the socket communicator sums in the thread
// communicator's rank order, so they are the in-process group's bit for bit — with the scheduler's
// features and layer-wise offload on; bad groups fail with the reason on every node.
#include <gtest/gtest.h>

#include <thread>

#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/parallel/tcp.h"
#include "support/expect_error.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<TokenLogprob>>> logprobs;
};

EngineConfig config(int64_t layers = 2) {
  EngineConfig ec;
  ec.model.path = testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", layers}}, 41);
  ec.model.backend = Backend::kCpu;
  ec.cache.block_size = 8;
  ec.scheduler.max_num_batched_tokens = 256;
  return ec;
}

Outcome outcome(const std::vector<RequestOutput>& outs) {
  Outcome r;
  for (const RequestOutput& o : outs) {
    r.tokens.push_back(o.token_ids);
    r.logprobs.push_back(o.logprobs);
  }
  return r;
}

void expect_identical(const Outcome& got, const Outcome& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t r = 0; r < want.logprobs.size(); ++r) {
    ASSERT_EQ(got.logprobs[r].size(), want.logprobs[r].size());
    for (size_t s = 0; s < want.logprobs[r].size(); ++s)
      for (size_t k = 0; k < want.logprobs[r][s].size(); ++k) {
        EXPECT_EQ(got.logprobs[r][s][k].id, want.logprobs[r][s][k].id);
        EXPECT_EQ(got.logprobs[r][s][k].logprob, want.logprobs[r][s][k].logprob);  // bitwise
      }
  }
}

// Runs `body` on node 0's LLM of a group of `nnodes` nodes (tp ranks in all), the other nodes as worker
// threads; returns each worker's error ("" when it ended cleanly).
std::vector<std::string> run_group(EngineConfig ec, int64_t nnodes, int64_t tp,
                                   const std::function<void(LLM&)>& body) {
  ec.parallel.tensor_parallel_size = tp;
  ec.parallel.nnodes = nnodes;
  ec.parallel.dist_init_addr = "127.0.0.1:" + std::to_string(Listener("127.0.0.1", 0).port());
  std::vector<std::string> errors(static_cast<size_t>(nnodes));
  std::vector<std::thread> workers;
  for (int64_t k = 1; k < nnodes; ++k)
    workers.emplace_back([&, k, ec] {
      EngineConfig w = ec;
      w.parallel.node_rank = k;
      try {
        LLMEngine::run_worker(w);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(k)] = e.what();
      }
    });
  try {
    LLM llm(ec);
    body(llm);
  } catch (const std::exception& e) {
    errors[0] = e.what();
  }
  for (std::thread& t : workers) t.join();
  return errors;
}

Outcome generate_on_group(const EngineConfig& ec, int64_t nnodes, int64_t tp,
                          const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens = 10) {
  Outcome r;
  const auto errors = run_group(ec, nnodes, tp, [&](LLM& llm) {
    r = outcome(llm.generate(prompts, testing::greedy(max_tokens, 5)));
  });
  for (size_t k = 0; k < errors.size(); ++k) EXPECT_EQ(errors[k], "") << "node " << k;
  return r;
}

Outcome generate_in_process(EngineConfig ec, int64_t tp, const std::vector<std::vector<int32_t>>& prompts,
                            int64_t max_tokens = 10) {
  ec.parallel.tensor_parallel_size = tp;
  return outcome(LLM(ec).generate(prompts, testing::greedy(max_tokens, 5)));
}

TEST(MultiNode, GroupsOverNodesGiveTheInProcessGroupsTokens) {
  const EngineConfig ec = config();
  const auto prompts = random_prompts({1, 7, 8, 9, 33, 70}, 500, 11);
  const Outcome one = generate_in_process(ec, 1, prompts);
  const Outcome tp2 = generate_in_process(ec, 2, prompts);
  const Outcome tp4 = generate_in_process(ec, 4, prompts);
  EXPECT_EQ(tp2.tokens, one.tokens);
  EXPECT_EQ(tp4.tokens, one.tokens);
  expect_identical(generate_on_group(ec, 2, 2, prompts), tp2, "2 nodes x 1 rank");
  expect_identical(generate_on_group(ec, 2, 4, prompts), tp4, "2 nodes x 2 ranks");
  expect_identical(generate_on_group(ec, 4, 4, prompts), tp4, "4 nodes x 1 rank");
}

TEST(MultiNode, SchedulingFeaturesAndOffloadWorkAcrossNodes) {
  // Prefix caching (a shared 24-token prefix), 16-token chunked prefill, two sequences per step, async
  // scheduling on and off; then layer-wise offload of the 70-token prompt beside paged requests.
  EngineConfig ec = config();
  ec.scheduler.max_num_batched_tokens = 16;
  ec.scheduler.max_num_seqs = 2;
  auto prompts = random_prompts({24, 24, 24}, 500, 12);
  const auto tails = random_prompts({5, 11, 1}, 500, 13);
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompts[i] = prompts[0];
    prompts[i].insert(prompts[i].end(), tails[i].begin(), tails[i].end());
  }
  for (bool async : {false, true}) {
    ec.scheduler.async_scheduling = async;
    expect_identical(generate_on_group(ec, 2, 4, prompts, 12), generate_in_process(ec, 4, prompts, 12),
                     async ? "async" : "sync");
  }
  EngineConfig off = config();
  off.model.max_model_len = 256;
  off.offload.enabled = true;
  off.offload.min_tokens = 60;
  off.offload.block_size = 8;
  off.scheduler.max_num_batched_tokens = 32;
  const auto mixed = random_prompts({1, 7, 33, 70}, 500, 11);
  Outcome got;
  int64_t offloaded_prefills = 0;
  const auto errors = run_group(off, 2, 2, [&](LLM& llm) {
    got = outcome(llm.generate(mixed, testing::greedy(10, 5)));
    offloaded_prefills = llm.engine().runner_stats().offload->steps.prefills;
  });
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
  expect_identical(got, generate_in_process(off, 2, mixed), "offload");
  EXPECT_EQ(offloaded_prefills, 1);
}

TEST(MultiNode, BadGroupsFailWithTheReasonOnEveryNode) {
  const EngineConfig ec = config();
  // A worker started with another max_model_len: node 0 refuses it, both say which setting differs.
  {
    EngineConfig c = ec;
    c.parallel.tensor_parallel_size = 2;
    c.parallel.nnodes = 2;
    c.parallel.dist_init_addr = "127.0.0.1:" + std::to_string(Listener("127.0.0.1", 0).port());
    std::string worker_error;
    std::thread worker([&] {
      EngineConfig w = c;
      w.parallel.node_rank = 1;
      w.model.max_model_len = 64;
      try {
        LLMEngine::run_worker(w);
      } catch (const std::exception& e) {
        worker_error = e.what();
      }
    });
    testing::expect_error([&] { LLM llm(c); }, {"refused node 1", "max_model_len="});
    worker.join();
    EXPECT_NE(worker_error.find("refused node 1: its settings differ"), std::string::npos) << worker_error;
    EXPECT_NE(worker_error.find("the peer max_model_len=64"), std::string::npos) << worker_error;
  }
  // The engine belongs on node 0; a worker on node 0 has no one to serve.
  EngineConfig c = ec;
  c.parallel.tensor_parallel_size = 2;
  c.parallel.nnodes = 2;
  c.parallel.node_rank = 1;
  c.parallel.dist_init_addr = "127.0.0.1:1";
  testing::expect_error([&] { LLM llm(c); }, {"node_rank 1 runs `nanovllm worker`"});
  c.parallel.node_rank = 0;
  testing::expect_error([&] { LLMEngine::run_worker(c); }, {"nanovllm worker runs nodes 1..nnodes-1"});
  // Shapes the group cannot take.
  c.parallel.tensor_parallel_size = 1;
  testing::expect_error([&] { LLM llm(c); }, {"tensor_parallel_size 1 must be a multiple of nnodes 2"});
  c.parallel.tensor_parallel_size = 2;
  c.parallel.dist_init_addr = "";
  testing::expect_error([&] { LLM llm(c); }, {"nnodes 2 needs dist_init_addr HOST:PORT"});
  c.parallel.dist_init_addr = "127.0.0.1:1";
  c.parallel.node_rank = 2;
  testing::expect_error([&] { LLM llm(c); }, {"node_rank 2 outside [0, nnodes 2)"});
}

}  // namespace
}  // namespace nanovllm
