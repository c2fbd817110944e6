// The engine around a Qwen3MoeForCausalLM (the qwen3-moe-tiny preset: 8 experts, top-2, MoE layers 1 and 5
// among dense ones) on the CPU backend: every way of scheduling or placing the work gives the tokens of a plain
// run — chunked prefill, batching, prefix caching, preemption, layer-wise CPU offload (also with its chunked layer
// prefill), tensor parallel over 2 and 4 ranks (tensor parallel inside every expert), Quest at a covering budget
// and every sparse prefill policy at its full pattern — with the top-5 logprobs within 1e-4 (1e-5 where the same
// kernels run in the same order). A wrong routing or expert slice moves logprobs by O(1).
#include <gtest/gtest.h>

#include <cmath>

#include "nanovllm/llm/llm.h"
#include "nanovllm/sparse/quest_attention.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<TokenLogprob>>> logprobs;  // [request][step][top-5]
};

Outcome outcome(const std::vector<RequestOutput>& outs) {
  Outcome r;
  for (const RequestOutput& o : outs) {
    r.tokens.push_back(o.token_ids);
    r.logprobs.push_back(o.logprobs);
  }
  return r;
}

// Same tokens, the top-5 logprobs by rank within `tol` (the top id identical).
void expect_same(const Outcome& got, const Outcome& want, float tol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.tokens, want.tokens);
  float worst = 0;
  for (size_t r = 0; r < want.logprobs.size(); ++r) {
    ASSERT_EQ(got.logprobs[r].size(), want.logprobs[r].size());
    for (size_t s = 0; s < want.logprobs[r].size(); ++s) {
      const auto& a = got.logprobs[r][s];
      const auto& b = want.logprobs[r][s];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(a.at(0).id, b.at(0).id) << "request " << r << " step " << s;
      for (size_t k = 0; k < b.size(); ++k) {
        EXPECT_NEAR(a[k].logprob, b[k].logprob, tol) << "request " << r << " step " << s << " k " << k;
        worst = std::max(worst, std::fabs(a[k].logprob - b[k].logprob));
      }
    }
  }
  std::printf("[%s] max |logprob diff| = %.3g\n", what.c_str(), static_cast<double>(worst));
}

class MoeEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::preset_model_dir("qwen3-moe-tiny", "engine", nlohmann::json::object(), 61);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;
    base_.model.max_model_len = 512;
    base_.scheduler.max_num_batched_tokens = 512;
  }
  static Outcome run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    LLM llm(ec);
    return outcome(llm.generate(prompts, testing::greedy(max_tokens, 5)));
  }
  // Each prompt alone, whole, without prefix caching: the reference.
  Outcome one_by_one(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) const {
    EngineConfig ec = base_;
    ec.cache.enable_prefix_caching = false;
    ec.scheduler.enable_chunked_prefill = false;
    Outcome all;
    for (const auto& p : prompts) {
      Outcome one = run(ec, {p}, max_tokens);
      all.tokens.push_back(one.tokens[0]);
      all.logprobs.push_back(one.logprobs[0]);
    }
    return all;
  }
  EngineConfig base_;
};

TEST_F(MoeEngine, TheModelIsSparseWhereTheConfigSaysSo) {
  LLM llm(base_);
  const ModelConfig& c = llm.engine().model_config();
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(3));  // mlp_only_layers
  EXPECT_TRUE(c.is_moe_layer(5));
}

TEST_F(MoeEngine, BatchingAndChunkedPrefillMatchOneByOne) {
  const auto prompts = random_prompts({1, 5, 8, 9, 37, 70}, 512, 1);
  const Outcome reference = one_by_one(prompts, 12);
  expect_same(run(base_, prompts, 12), reference, 1e-4f, "one batch");
  EngineConfig chunked = base_;
  chunked.scheduler.max_num_batched_tokens = 16;  // smaller than the prompts: chunks mixed with decodes
  chunked.scheduler.max_num_seqs = 16;
  expect_same(run(chunked, prompts, 12), reference, 1e-4f, "chunked prefill");
}

TEST_F(MoeEngine, PrefixCachingHitsAndMatches) {
  auto prompts = random_prompts({24, 24}, 512, 3);
  const auto tails = random_prompts({5, 11}, 512, 4);
  prompts[1] = prompts[0];
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i].insert(prompts[i].end(), tails[i].begin(), tails[i].end());
  const Outcome reference = one_by_one(prompts, 10);
  LLM llm(base_);
  const auto first = llm.generate({prompts[0]}, testing::greedy(10, 5));
  const auto second = llm.generate({prompts[1]}, testing::greedy(10, 5));
  EXPECT_EQ(second[0].num_cached_tokens, 24);
  expect_same(outcome({first[0], second[0]}), reference, 1e-4f, "prefix cache hit");
}

TEST_F(MoeEngine, PreemptionByRecomputeMatches) {
  const auto prompts = random_prompts({20, 30, 25, 9}, 512, 6);
  const Outcome reference = one_by_one(prompts, 16);
  EngineConfig tight = base_;
  tight.cache.num_kv_blocks = 12;  // 96 slots: four sequences growing to ~46 tokens cannot all stay resident
  tight.model.max_model_len = 64;
  LLM llm(tight);
  const auto outs = llm.generate(prompts, testing::greedy(16, 5));
  int64_t preemptions = 0;
  for (const auto& o : outs) preemptions += o.num_preemptions;
  EXPECT_GT(preemptions, 0);
  expect_same(outcome(outs), reference, 1e-4f, "preemption");
}

TEST_F(MoeEngine, TensorParallelRanksGiveTheOneRankTokens) {
  // Tensor parallel inside every expert: 32 intermediate columns split 16 / 8 per rank; at 4 ranks the two
  // KV heads are replicated.
  const auto prompts = random_prompts({1, 7, 8, 9, 33, 70}, 512, 11);
  const Outcome whole = run(base_, prompts, 10);
  for (int64_t tp : {2, 4}) {
    EngineConfig ec = base_;
    ec.parallel.tensor_parallel_size = tp;
    expect_same(run(ec, prompts, 10), whole, 1e-4f, "TP" + std::to_string(tp));
  }
  EngineConfig chunked = base_;  // with chunked prefill too
  chunked.parallel.tensor_parallel_size = 2;
  chunked.scheduler.max_num_batched_tokens = 16;
  expect_same(run(chunked, prompts, 10), whole, 1e-4f, "TP2, chunked prefill");
}

TEST_F(MoeEngine, OffloadMatchesTheResidentCache) {
  const auto prompts = random_prompts({1, 7, 8, 9, 17, 61}, 512, 21);
  const Outcome resident = run(base_, prompts, 20);
  EngineConfig off = base_;
  off.offload.enabled = true;
  off.offload.min_tokens = 1;  // every request takes the offload path
  off.offload.block_size = 8;
  {
    LLM llm(off);
    const Outcome got = outcome(llm.generate(prompts, testing::greedy(20, 5)));
    expect_same(got, resident, 1e-5f, "offload");
    EXPECT_EQ(llm.engine().runner_stats().offload->steps.prefills, static_cast<int64_t>(prompts.size()));
  }
  // A 16-row workspace: a 61-token prompt's layers run in 4 chunks over the layer buffer, the MoE scratch
  // holds 16 tokens.
  EngineConfig paged16 = base_, off16 = off;
  paged16.scheduler.max_num_batched_tokens = 16;
  off16.scheduler.max_num_batched_tokens = 16;
  expect_same(run(off16, prompts, 12), run(paged16, prompts, 12), 1e-5f, "offload, chunked layer prefill");
  EngineConfig off_tp = off;  // each rank offloads its own KV heads
  off_tp.parallel.tensor_parallel_size = 2;
  expect_same(run(off_tp, prompts, 20), resident, 1e-4f, "offload, TP2");
}

TEST_F(MoeEngine, SparseDecodeAtACoveringBudgetAndFullSparsePrefillPatternsGiveTheDenseResult) {
  const auto prompts = random_prompts({9, 150, 250}, 512, 31);
  EngineConfig dense = base_;
  dense.scheduler.max_num_batched_tokens = 160;
  dense.scheduler.max_num_seqs = 1;  // every prefill chunk alone: each may go sparse
  const Outcome reference = run(dense, prompts, 16);
  EngineConfig quest = dense;
  quest.sparse.policy = "quest";
  quest.sparse.budget_tokens = 512;
  {
    LLM llm(quest);
    expect_same(outcome(llm.generate(prompts, testing::greedy(16, 5))), reference, 0.0f, "quest, covering budget");
    ASSERT_TRUE(llm.engine().runner_stats().sparse_decode.has_value());
    EXPECT_GT(llm.engine().runner_stats().sparse_decode->sparse_layer_steps, 0);
  }
  for (SparsePrefillPolicy p : {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kAvgPool}) {
    EngineConfig ec = dense;
    ec.sparse_prefill.policy = p;
    ec.sparse_prefill.threshold = 1.0;  // the full pattern
    ec.sparse_prefill.block_size = 16;
    ec.sparse_prefill.min_tokens = 64;
    ec.sparse_prefill.stride = 4;
    ec.sparse_prefill.last_q = 32;
    ec.sparse_prefill.min_budget = 16;
    LLM llm(ec);
    expect_same(outcome(llm.generate(prompts, testing::greedy(16, 5))), reference, 0.0f,
                std::string("sparse prefill ") + sparse_prefill_policy_name(p));
    ASSERT_TRUE(llm.engine().runner_stats().sparse_prefill.has_value());
    EXPECT_GT(llm.engine().runner_stats().sparse_prefill->sparse_layer_chunks, 0);
  }
}

}  // namespace
}  // namespace nanovllm
