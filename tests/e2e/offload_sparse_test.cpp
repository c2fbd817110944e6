// Quest sparse decode over layer-wise CPU offload on the CPU backend, end to end. The offloaded path must
// give exactly what the GPU-resident sparse path gives (same metadata, same selection, same keys, same
// kernels; only where the selected pages come from differs): with a budget covering the context, the
// dense tokens; with a small one, the resident sparse tokens and logprobs, bit for bit, with and without
// the hot-page cache, across host block flushes and a prompt whose last page straddles the host pool's
// end; with an fp8 KV cache and with fp8 weights too. The CPU offload device checks every host-pool read against the events, so a fetch that runs
// before the flush it needs fails here.
#include <gtest/gtest.h>

#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_runner.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

SamplingParams greedy(int64_t max_tokens) { return testing::greedy(max_tokens, 3); }

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;  // per request, per step: the top-3 logprobs
  PageCacheCounters cache;                   // of every request (the counters run since construction)
  SparseDecodeCounters quest;
};

class OffloadSparse : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::tiny_model_dir("offload-sparse", {{"num_hidden_layers", 3}}, 41);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;  // = the Quest page
    base_.model.max_model_len = 320;
    base_.scheduler.max_num_batched_tokens = 512;
  }
  EngineConfig resident(int64_t budget) const {
    EngineConfig ec = base_;
    ec.sparse.policy = "quest";
    ec.sparse.budget_tokens = budget;
    return ec;
  }
  EngineConfig offloaded(int64_t budget, int64_t cache_tokens = -1, int64_t host_block = 16) const {
    EngineConfig ec = resident(budget);
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;  // every request takes the offload path
    ec.offload.block_size = host_block;
    ec.offload.num_kv_buffers = 2;
    ec.sparse.gpu_cache_tokens = cache_tokens;
    return ec;
  }
  static Outcome run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    LLM llm(ec);
    Outcome r;
    for (const auto& prompt : prompts) {  // one at a time
      const RequestOutput o = llm.generate({prompt}, greedy(max_tokens)).at(0);
      r.tokens.push_back(o.token_ids);
      r.logprobs.emplace_back();
      for (const auto& step : o.logprobs)
        for (const auto& t : step) r.logprobs.back().push_back(t.logprob);
    }
    if (const auto off = llm.engine().runner_stats().offload; off && off->sparse_decode) {
      r.cache = llm.engine().offload_page_cache();
      r.quest = *off->sparse_decode;
    }
    return r;
  }
  // Under `variant` (an option the offloaded path must honour as the resident one does): the offloaded Quest tokens and
  // logprobs equal the resident sparse path's, bit for bit, one request at a time (with the hot-page cache and, when
  // `uncached`, without) and three at once. Returns the resident outcome.
  Outcome expect_offloaded_equals_resident(EngineConfig (*variant)(EngineConfig), bool uncached,
                                           const std::vector<std::vector<int32_t>>& prompts) const {
    const Outcome want = run(variant(resident(48)), prompts, 30);
    const Outcome alone = run(variant(offloaded(48)), prompts, 30);
    EXPECT_EQ(alone.tokens, want.tokens);
    EXPECT_EQ(alone.logprobs, want.logprobs);
    EXPECT_GT(alone.cache.hits, 0);
    EXPECT_GT(alone.quest.sparse_layer_steps, 0);
    if (uncached) {
      const Outcome none = run(variant(offloaded(48, 0)), prompts, 30);
      EXPECT_EQ(none.tokens, want.tokens);
      EXPECT_EQ(none.logprobs, want.logprobs);
    }
    EngineConfig ec = variant(offloaded(48, 48, 8));
    ec.offload.max_num_seqs = 3;
    LLM llm(ec);
    const std::vector<RequestOutput> outs = llm.generate(prompts, greedy(30));
    for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i].token_ids, want.tokens[i]) << "request " << i;
    return want;
  }
  EngineConfig base_;
};

TEST_F(OffloadSparse, BudgetCoveringTheContextGivesTheDenseTokens) {
  const auto prompts = random_prompts({9, 100, 203}, 512, 1);
  const Outcome dense = run(base_, prompts, 24);
  const Outcome sparse = run(offloaded(320), prompts, 24);
  EXPECT_EQ(sparse.tokens, dense.tokens);
  EXPECT_EQ(sparse.logprobs, dense.logprobs);
  EXPECT_GT(sparse.quest.sparse_layer_steps, 0);
  EXPECT_EQ(sparse.quest.attended_keys, sparse.quest.context_keys);
}

TEST_F(OffloadSparse, SmallBudgetMatchesTheResidentSparsePathBitForBit) {
  // 203 tokens: the host pool ends mid-page (203 = 25 x 8 + 3); decode flushes every 16 tokens.
  const auto prompts = random_prompts({203, 250, 161}, 512, 2);
  const Outcome want = run(resident(48), prompts, 40);
  const Outcome cached = run(offloaded(48), prompts, 40);
  EXPECT_EQ(cached.tokens, want.tokens);
  EXPECT_EQ(cached.logprobs, want.logprobs);
  EXPECT_LT(cached.quest.attended_keys * 3, cached.quest.context_keys);  // really sparse
  // The hot-page cache served some pages and the host the others (3 layers x 2 KV heads x ~3 middle
  // pages x 40 steps), and results do not depend on it.
  EXPECT_GT(cached.cache.hits, 0);
  EXPECT_GT(cached.cache.misses, 0);
  const Outcome uncached = run(offloaded(48, 0), prompts, 40);
  EXPECT_EQ(uncached.tokens, want.tokens);
  EXPECT_EQ(uncached.logprobs, want.logprobs);
  EXPECT_EQ(uncached.cache.hits, 0);
  EXPECT_EQ(uncached.cache.misses, cached.cache.hits + cached.cache.misses);
  // A cache of exactly one selection evicts all the time and still gives the same result.
  const Outcome tight = run(offloaded(48, 48, 8), prompts, 40);
  EXPECT_EQ(tight.tokens, want.tokens);
  EXPECT_EQ(tight.logprobs, want.logprobs);
}

TEST_F(OffloadSparse, BackToBackRequestsForgetThePreviousSequencesPages) {
  // The second request reuses the host pool, the page metadata and the cache's slots of the first.
  const auto prompts = random_prompts({240, 120, 240}, 512, 3);
  const Outcome want = run(resident(40), prompts, 24);
  const Outcome got = run(offloaded(40), prompts, 24);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logprobs, want.logprobs);
}

// Several offloaded sequences in one decode step (offload max_num_seqs 3), each selecting from its own
// lane's page metadata and hot-page cache and fetching from its own host pool: every request's tokens and
// logprobs equal the resident sparse path's, bit for bit (prefills next to decodes included: the offloaded
// step runs them apart, so its decodes stay sparse); a budget covering the context gives the dense ones.
// Four requests through three lanes: one lane is reused. Every decode step plans and fetches all its rows in one
// batched call per layer (page_cache_plan_rows / page_cache_fetch_rows), also with a hot-page cache of exactly one
// selection that wraps and evicts every step.
TEST_F(OffloadSparse, ConcurrentSequencesMatchTheResidentSparsePath) {
  const auto prompts = random_prompts({203, 96, 250, 161}, 512, 4);
  const auto together = [&](EngineConfig ec) {
    ec.offload.max_num_seqs = 3;
    LLM llm(ec);
    Outcome r;
    for (const RequestOutput& o : llm.generate(prompts, greedy(30))) {
      r.tokens.push_back(o.token_ids);
      r.logprobs.emplace_back();
      for (const auto& step : o.logprobs)
        for (const auto& t : step) r.logprobs.back().push_back(t.logprob);
    }
    if (const auto off = llm.engine().runner_stats().offload) {
      r.cache = llm.engine().offload_page_cache();
      EXPECT_LT(off->steps.decode_steps, off->steps.decode_tokens);  // batched
    }
    return r;
  };
  // The resident path one request at a time: run together, its mixed prefill + decode steps attend densely.
  const Outcome want = run(resident(48), prompts, 30);
  const Outcome got = together(offloaded(48));
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logprobs, want.logprobs);
  EXPECT_GT(got.cache.hits, 0);
  EXPECT_GT(got.cache.misses, 0);
  const Outcome uncached = together(offloaded(48, 0));
  EXPECT_EQ(uncached.tokens, want.tokens);
  EXPECT_EQ(uncached.logprobs, want.logprobs);
  const Outcome tight = together(offloaded(48, 48, 8));
  EXPECT_EQ(tight.tokens, want.tokens);
  EXPECT_EQ(tight.logprobs, want.logprobs);
  EXPECT_EQ(together(offloaded(320)).tokens, together(base_).tokens);
}

// An fp8 KV cache: the sparse fetch reads the host pools' head-major copy of the scales (written by the prefill
// and by every decode flush).
TEST_F(OffloadSparse, Fp8CacheMatchesTheResidentFp8SparsePath) {
  const auto fp8_cache = [](EngineConfig ec) {
    ec.cache.kv_cache_dtype = "fp8";
    return ec;
  };
  expect_offloaded_equals_resident(fp8_cache, /*uncached=*/true, random_prompts({203, 96, 250}, 512, 5));
}

// FP8 weights (`--quantization fp8`: the bf16 checkpoint quantized per 128 x 128 block at load; the CPU runs the
// dequantized values): the offloaded path builds its model from the same options; and the outcome is not the
// unquantized model's (the option reached the weights).
TEST_F(OffloadSparse, Fp8WeightsMatchTheResidentSparsePath) {
  const auto prompts = random_prompts({203, 96, 250}, 512, 5);
  const auto fp8_weights = [](EngineConfig ec) {
    ec.model.quantization = "fp8";
    return ec;
  };
  const Outcome want = expect_offloaded_equals_resident(fp8_weights, /*uncached=*/false, prompts);
  EXPECT_NE(run(resident(48), prompts, 30).logprobs, want.logprobs);
}

}  // namespace
}  // namespace nanovllm
