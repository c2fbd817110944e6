// Greedy outputs must not depend on how the engine schedules the work: prefix caching, chunked
// prefill, batch composition and preemption by recompute all give the tokens of a plain run.
#include <gtest/gtest.h>

#include <random>

#include "nanovllm/llm/llm.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

using testing::greedy;

std::vector<std::vector<int32_t>> run(EngineConfig ec, const std::vector<std::vector<int32_t>>& prompts,
                                      int64_t max_tokens = 12) {
  LLM llm(ec);
  std::vector<std::vector<int32_t>> tokens;
  for (const auto& o : llm.generate(prompts, greedy(max_tokens))) tokens.push_back(o.token_ids);
  return tokens;
}

class Invariance : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::tiny_model_dir("invariance", {{"num_hidden_layers", 2}}, 5);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;
    base_.scheduler.max_num_batched_tokens = 1024;
  }
  EngineConfig base_;
};

// Each prompt alone, no prefix caching, no chunking: the reference.
std::vector<std::vector<int32_t>> one_by_one(EngineConfig ec, const std::vector<std::vector<int32_t>>& prompts,
                                             int64_t max_tokens = 12) {
  ec.cache.enable_prefix_caching = false;
  ec.scheduler.enable_chunked_prefill = false;
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) out.push_back(run(ec, {p}, max_tokens)[0]);
  return out;
}

TEST_F(Invariance, BatchCompositionDoesNotChangeTokens) {
  const auto prompts = random_prompts({1, 5, 8, 9, 17, 40, 63}, 512, 1);
  const auto reference = one_by_one(base_, prompts);
  EXPECT_EQ(run(base_, prompts), reference);
  auto small = base_;
  small.scheduler.max_num_seqs = 2;  // at most two sequences per step: a different interleaving
  EXPECT_EQ(run(small, prompts), reference);
}

TEST_F(Invariance, ChunkedPrefillMatchesWholePrefill) {
  const auto prompts = random_prompts({37, 70, 5}, 512, 2);
  const auto reference = one_by_one(base_, prompts);
  auto chunked = base_;
  chunked.scheduler.max_num_batched_tokens = 16;  // smaller than the prompts: several chunks each, mixed with decodes
  chunked.scheduler.max_num_seqs = 16;
  EXPECT_EQ(run(chunked, prompts), reference);
}

TEST_F(Invariance, PrefixCachingHitsAndMatches) {
  // Shared 24-token prefix (3 full blocks), different tails.
  auto prompts = random_prompts({24, 24, 24}, 512, 3);
  const auto tails = random_prompts({5, 11, 1}, 512, 4);
  for (size_t i = 1; i < prompts.size(); ++i) prompts[i] = prompts[0];
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i].insert(prompts[i].end(), tails[i].begin(), tails[i].end());
  const auto reference = one_by_one(base_, prompts);

  LLM llm(base_);
  // First request fills the cache; the next two hit it.
  const auto first = llm.generate({prompts[0]}, greedy(12));
  const auto rest = llm.generate({prompts[1], prompts[2]}, greedy(12));
  EXPECT_EQ(first[0].token_ids, reference[0]);
  EXPECT_EQ(rest[0].token_ids, reference[1]);
  EXPECT_EQ(rest[1].token_ids, reference[2]);
  EXPECT_EQ(first[0].num_cached_tokens, 0);
  EXPECT_EQ(rest[0].num_cached_tokens, 24);
  EXPECT_EQ(rest[1].num_cached_tokens, 24);
  // The same prompt again: all full blocks hit, the last token is recomputed.
  const auto again = llm.generate({prompts[1]}, greedy(12));
  EXPECT_EQ(again[0].token_ids, reference[1]);
  EXPECT_GE(again[0].num_cached_tokens, 24);
}

TEST_F(Invariance, PreemptionByRecomputeMatches) {
  const auto prompts = random_prompts({20, 30, 25, 9}, 512, 6);
  const auto reference = one_by_one(base_, prompts, 16);
  auto tight = base_;
  tight.cache.num_kv_blocks = 12;  // 96 slots: four sequences growing to ~46 tokens each cannot all stay resident
  tight.model.max_model_len = 64;
  LLM llm(tight);
  const auto outputs = llm.generate(prompts, greedy(16));
  int64_t preemptions = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i].token_ids, reference[i]) << "prompt " << i;
    preemptions += outputs[i].num_preemptions;
  }
  EXPECT_GT(preemptions, 0) << "the block pool was meant to force preemption";
}

}  // namespace
}  // namespace nanovllm
