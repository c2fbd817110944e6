// Quest sparse decode on the CPU backend, end to end: a budget covering the context gives exactly the
// dense tokens and logprobs (same kernels' arithmetic over the same keys); a small budget really attends
// fewer keys, is deterministic, and survives prefix-cache hits (the page metadata lives with the block);
// impossible configurations are refused with the field named.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/sparse/policies.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

SamplingParams greedy(int64_t max_tokens) { return testing::greedy(max_tokens, 3); }

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> top_logprobs;  // per request, per step: the top logprob
  SparseDecodeCounters counters;
};

class SparseDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::tiny_model_dir("sparse", {{"num_hidden_layers", 2}}, 31);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;
    base_.model.max_model_len = 320;
    base_.scheduler.max_num_batched_tokens = 512;
  }
  EngineConfig quest(int64_t budget) const {
    EngineConfig ec = base_;
    ec.sparse.policy = "quest";
    ec.sparse.budget_tokens = budget;
    return ec;
  }
  static Outcome run(LLM& llm, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    Outcome r;
    for (const RequestOutput& o : llm.generate(prompts, greedy(max_tokens))) {
      r.tokens.push_back(o.token_ids);
      r.top_logprobs.emplace_back();
      for (const auto& step : o.logprobs) r.top_logprobs.back().push_back(step.at(0).logprob);
    }
    if (const auto c = llm.engine().runner_stats().sparse_decode) r.counters = *c;
    return r;
  }
  static Outcome run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    LLM llm(ec);
    return run(llm, prompts, max_tokens);
  }
  EngineConfig base_;
};

TEST_F(SparseDecode, BudgetCoveringTheContextGivesTheDenseResult) {
  const auto prompts = random_prompts({1, 8, 9, 63, 150, 250}, 512, 1);
  const Outcome dense = run(base_, prompts, 24);
  const Outcome sparse = run(quest(320), prompts, 24);
  EXPECT_EQ(sparse.tokens, dense.tokens);
  EXPECT_EQ(sparse.top_logprobs, dense.top_logprobs);  // bit-identical, not just close
  EXPECT_GT(sparse.counters.sparse_layer_steps, 0);
  EXPECT_GT(sparse.counters.dense_layer_steps, 0);  // the prefill steps
  EXPECT_EQ(sparse.counters.attended_keys, sparse.counters.context_keys);
}

TEST_F(SparseDecode, SmallBudgetAttendsFewerKeysDeterministically) {
  const auto prompts = random_prompts({200, 240, 17}, 512, 2);
  const Outcome a = run(quest(48), prompts, 20);  // 6 pages of 8: sink, 3 selected, 2 recent
  EXPECT_GT(a.counters.sparse_layer_steps, 0);
  EXPECT_LT(a.counters.attended_keys * 3, a.counters.context_keys);
  const Outcome b = run(quest(48), prompts, 20);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.top_logprobs, b.top_logprobs);
  // The 17-token prompt fits the budget all along its 20 decode steps: its tokens are the dense ones.
  const Outcome dense = run(base_, prompts, 20);
  EXPECT_EQ(a.tokens[2], dense.tokens[2]);
  // The long ones attend a subset: their logprobs move (a wrong selection of all keys would not).
  EXPECT_NE(a.top_logprobs[0], dense.top_logprobs[0]);
}

TEST_F(SparseDecode, PrefixCacheHitsKeepTheirPageMetadata) {
  const auto prompts = random_prompts({180}, 512, 3);
  LLM llm(quest(48));
  const Outcome first = run(llm, prompts, 16);
  const Outcome again = run(llm, prompts, 16);  // the prompt's full blocks come from the prefix cache
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.top_logprobs, first.top_logprobs);
  const Outcome fresh = run(quest(48), prompts, 16);
  EXPECT_EQ(fresh.tokens, first.tokens);
}

TEST_F(SparseDecode, RefusesImpossibleConfigurations) {
  EXPECT_THROW(find_decode_policy("qwest"), Error);
  EXPECT_STREQ(find_decode_policy("quest").name, "quest");
  EXPECT_THROW({ LLM llm(quest(24)); }, Error);  // 3 pages of 8: no page left to select
  EngineConfig small_cache = quest(64);
  small_cache.offload.enabled = true;
  small_cache.sparse.gpu_cache_tokens = 32;  // less than one selection
  EXPECT_THROW({ LLM llm(small_cache); }, Error);
}

}  // namespace
}  // namespace nanovllm
