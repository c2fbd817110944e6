// Tensor parallel on the CPU backend (ranks as threads, docs/tensor_parallel.md section 8): the model
// split over N ranks — column-parallel qkv / gate_up, row-parallel o / down with an all-reduce,
// vocab-parallel embedding and LM head with an all-gather — gives the tokens of the unsplit model, on
// Qwen3 and GLM-4 layouts, a padded vocabulary, an untied LM head, replicated KV heads (N > Hk), with
// prefix caching, chunked prefill, async scheduling, Quest and layer-wise CPU offload on. Logprobs agree within 1e-4: the
// ranks' partial sums are added in another order than one rank's dot product, so fp32 rounding differs
// (observed ~1e-6 on these models; the tolerance leaves room without hiding a wrong shard, which moves
// logprobs by O(1)).
#include <gtest/gtest.h>

#include <cmath>

#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_runner.h"
#include "support/expect_error.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

constexpr float kLogprobTolerance = 1e-4f;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<TokenLogprob>>> logprobs;  // [request][step][top-K]
};

SamplingParams greedy(int64_t max_tokens) { return testing::greedy(max_tokens, 5); }

Outcome run(EngineConfig ec, int64_t tp, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens = 10) {
  ec.parallel.tensor_parallel_size = tp;
  LLM llm(ec);
  Outcome r;
  for (const RequestOutput& o : llm.generate(prompts, greedy(max_tokens))) {
    r.tokens.push_back(o.token_ids);
    r.logprobs.push_back(o.logprobs);
  }
  return r;
}

// Same tokens; the same top-5 ids with logprobs within kLogprobTolerance.
void expect_same(const Outcome& split, const Outcome& whole, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(split.tokens, whole.tokens);
  ASSERT_EQ(split.logprobs.size(), whole.logprobs.size());
  float worst = 0;
  for (size_t r = 0; r < whole.logprobs.size(); ++r) {
    ASSERT_EQ(split.logprobs[r].size(), whole.logprobs[r].size());
    for (size_t s = 0; s < whole.logprobs[r].size(); ++s) {
      const auto& a = split.logprobs[r][s];
      const auto& b = whole.logprobs[r][s];
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < b.size(); ++k) {
        // By position: near-ties may swap ids within the tolerance, the values stay in order.
        EXPECT_NEAR(a[k].logprob, b[k].logprob, kLogprobTolerance) << "request " << r << " step " << s << " k " << k;
        worst = std::max(worst, std::fabs(a[k].logprob - b[k].logprob));
      }
      EXPECT_EQ(a.at(0).id, b.at(0).id);
    }
  }
  EXPECT_GT(whole.logprobs.at(0).size(), 0u);
  std::printf("[%s] max |logprob TP - TP1| = %.3g\n", what.c_str(), static_cast<double>(worst));
}

class TensorParallel : public ::testing::Test {
 protected:
  static EngineConfig config(const std::filesystem::path& model) {
    EngineConfig ec;
    ec.model.path = model;
    ec.model.backend = Backend::kCpu;
    ec.cache.block_size = 8;
    ec.scheduler.max_num_batched_tokens = 256;
    return ec;
  }
  // A mixed batch: prompts shorter and longer than a block, one longer than a step's budget below.
  const std::vector<std::vector<int32_t>> prompts_ = random_prompts({1, 7, 8, 9, 33, 70}, 500, 11);
};

TEST_F(TensorParallel, Qwen3SplitOverTwoAndFourRanksGivesTheUnsplitTokens) {
  // tiny: 4 heads, 2 KV heads, intermediate 128, vocab 512, tied embeddings. TP4 replicates the KV heads.
  const EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
  const Outcome whole = run(ec, 1, prompts_);
  expect_same(run(ec, 2, prompts_), whole, "qwen3 TP2");
  expect_same(run(ec, 4, prompts_), whole, "qwen3 TP4 (KV heads replicated)");
}

TEST_F(TensorParallel, PaddedVocabularyUntiedHeadAndBiasesSplitCorrectly) {
  // Vocabulary 509: ceil(509 / 4) = 128 rows per rank, the last rank 3 rows of padding. Untied LM head;
  // q/k/v biases (column-parallel, cut with their rows).
  const EngineConfig ec = config(testing::tiny_model_dir(
      "tp-padded", {{"vocab_size", 509}, {"tie_word_embeddings", false}, {"attention_bias", true}}, 42));
  const Outcome whole = run(ec, 1, prompts_);
  expect_same(run(ec, 2, prompts_), whole, "vocab 509 TP2");
  expect_same(run(ec, 4, prompts_), whole, "vocab 509 TP4");
}

TEST_F(TensorParallel, Glm4SplitOverTwoAndFourRanksGivesTheUnsplitTokens) {
  // GLM-4: q/k/v biases, partial interleaved RoPE.
  const EngineConfig ec = config(testing::preset_model_dir("glm4-tiny", "tp-glm4", {{"num_hidden_layers", 2}}, 43));
  const Outcome whole = run(ec, 1, prompts_);
  expect_same(run(ec, 2, prompts_), whole, "glm4 TP2");
  expect_same(run(ec, 4, prompts_), whole, "glm4 TP4");
}

TEST_F(TensorParallel, SchedulingFeaturesWorkSplit) {
  // Prefix caching (shared 24-token prefix), chunked prefill (16-token steps), a two-sequence batch
  // limit, and async scheduling off and on: the split model's tokens are the unsplit one's each way.
  EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
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
    const Outcome whole = run(ec, 1, prompts);
    expect_same(run(ec, 2, prompts), whole, async ? "async TP2" : "sync TP2");
  }
}

TEST_F(TensorParallel, QuestSparseDecodeSplitsPerHead) {
  // Quest scores pages per KV head, so each rank selects for its own heads: TP2 gives the TP1 tokens at
  // a budget that really drops pages.
  EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
  ec.model.max_model_len = 320;
  ec.sparse.policy = "quest";
  ec.sparse.budget_tokens = 32;
  const auto prompts = random_prompts({90, 130}, 500, 14);
  const Outcome whole = run(ec, 1, prompts, 12);
  expect_same(run(ec, 2, prompts, 12), whole, "quest TP2");
}

// Layer-wise CPU offload with every rank offloading its own KV heads (its own pool, ring and sequence
// state): TP2 (KV heads split) and TP4 (replicated) give the TP1 offload run's tokens and logprobs, across
// host blocks and prefill chunks, with the paged lane serving other requests beside it; the prefill and
// decode steps ran on every rank (each rank's stats).
TEST_F(TensorParallel, CpuOffloadOnEveryRankGivesTheUnsplitTokens) {
  EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
  ec.model.max_model_len = 256;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 60;  // the 70-token prompt (+ 10 tokens) is offloaded, the others stay paged
  ec.offload.block_size = 8;
  ec.offload.num_kv_buffers = 2;
  ec.scheduler.max_num_batched_tokens = 32;  // the offloaded prefill runs in chunks of 32 rows
  const Outcome whole = run(ec, 1, prompts_);
  for (int64_t n : {2, 4}) {
    expect_same(run(ec, n, prompts_), whole, "offload TP" + std::to_string(n));
    ec.parallel.tensor_parallel_size = n;
    LLM llm(ec);
    llm.generate({prompts_.back()}, greedy(10));
    const OffloadStats st = llm.engine().runner_stats().offload->steps;
    EXPECT_EQ(st.prefills, 1);
    EXPECT_EQ(st.decode_steps, 9);
    EXPECT_GT(st.h2d_bytes, 0);
  }
}

// Several offloaded requests at once on every rank (offload max_num_seqs 3; 4 of the 6 prompts reach
// min_tokens, so a lane is reused): each rank's batched decode steps give the unsplit engine's tokens.
TEST_F(TensorParallel, ConcurrentOffloadedRequestsOnEveryRankGiveTheUnsplitTokens) {
  EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
  ec.model.max_model_len = 256;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 18;  // 8, 9, 33 and 70 tokens (+ 10) are offloaded; 1 and 7 stay paged
  ec.offload.block_size = 8;
  ec.offload.num_kv_buffers = 2;
  ec.offload.max_num_seqs = 3;
  const Outcome whole = run(ec, 1, prompts_);
  for (int64_t n : {2, 4}) expect_same(run(ec, n, prompts_), whole, "concurrent offload TP" + std::to_string(n));
}

// The host memory check counts every rank's pool: TP2 splits the 2 KV heads (two half pools: TP1's bytes),
// TP4 replicates them (four half pools: twice TP1's), so a cpu_memory_limit of exactly TP1's need admits
// TP1 and TP2 and refuses TP4's request with the rank count in the message.
TEST_F(TensorParallel, OffloadHostLimitCountsEveryRanksPool) {
  EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
  ec.model.max_model_len = 256;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.offload.block_size = 8;
  const std::vector<int32_t> prompt = prompts_.back();  // 70 tokens, + 10 = 80: ten host blocks
  int64_t tp1_need = 0;
  {
    LLM llm(ec);
    tp1_need = llm.engine().offload_host_bytes(80);
  }
  ec.offload.cpu_memory_limit = tp1_need;
  for (int64_t n : {1, 2}) {
    ec.parallel.tensor_parallel_size = n;
    LLM llm(ec);
    EXPECT_EQ(llm.generate({prompt}, greedy(10)).at(0).token_ids.size(), 10u) << "TP" << n;
  }
  ec.parallel.tensor_parallel_size = 4;
  LLM llm(ec);
  testing::expect_error([&] { llm.generate({prompt}, greedy(10)); }, {"x 4 ranks", "more than cpu_memory_limit"});
}

TEST_F(TensorParallel, InvalidSplitsAreClearErrors) {
  EngineConfig ec = config(testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41));
  ec.parallel.tensor_parallel_size = 3;
  testing::expect_error([&] { LLM llm(ec); }, {"tensor_parallel_size 3 does not divide num_attention_heads 4"});
  ec.parallel.tensor_parallel_size = 8;
  testing::expect_error([&] { LLM llm(ec); }, {"tensor_parallel_size 8 does not divide num_attention_heads 4"});
  // 6 query heads over 3 KV heads: 2 ranks can split neither the KV heads nor replicate them.
  EngineConfig odd = config(testing::tiny_model_dir(
      "tp-odd-heads", {{"num_hidden_layers", 1}, {"num_attention_heads", 6}, {"num_key_value_heads", 3}}, 44));
  odd.parallel.tensor_parallel_size = 2;
  testing::expect_error([&] { LLM llm(odd); }, {"tensor_parallel_size 2 and num_key_value_heads 3"});
}

}  // namespace
}  // namespace nanovllm
