// Sparse prefill on the CPU backend, end to end, on the normal path (chunked prefill with a prefix) and the
// layer-wise offload path: every policy at its full threshold gives exactly the dense tokens and logprobs (the
// full pattern is dense attention, same arithmetic); low thresholds still run, attend fewer key blocks and are
// deterministic; dense layers and short contexts stay dense; a step of several sequences goes sparse per chunk, as the
// offload path does; Quest decode and sparse prefill work together; impossible configurations are refused with the
// field named. Quality on a trained model, every path x policy: tests/eval/quality_matrix_test.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/sparse/quest_attention.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

SamplingParams greedy(int64_t max_tokens) { return testing::greedy(max_tokens, 3); }

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> top_logprobs;  // per request, per step: the top logprob
  SparsePrefillCounters counters;
  bool has_counters = false;
  int64_t offloaded_prefills = 0;
};

class SparsePrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::tiny_model_dir("sparse-prefill", {{"num_hidden_layers", 3}}, 41);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;
    base_.model.max_model_len = 640;
    base_.scheduler.max_num_batched_tokens = 160;  // prompts prefill in chunks after a prefix
    base_.scheduler.max_num_seqs = 1;              // one sequence per step: every chunk may go sparse
  }
  // `policy` at `threshold` with 16-token pattern blocks; every chunk whose context reaches 64 goes sparse.
  EngineConfig sparse(SparsePrefillPolicy policy, double threshold, bool offload = false) const {
    EngineConfig ec = base_;
    ec.sparse_prefill.policy = policy;
    ec.sparse_prefill.threshold = threshold;
    ec.sparse_prefill.block_size = 16;
    ec.sparse_prefill.min_tokens = 64;
    ec.sparse_prefill.stride = 4;
    ec.sparse_prefill.last_q = 32;
    ec.sparse_prefill.min_budget = 16;
    if (offload) with_offload(ec);
    return ec;
  }
  static void with_offload(EngineConfig& ec) {
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;  // every request takes the offload path (its prefill chunks: the workspace rows)
    ec.offload.block_size = 8;
  }
  static Outcome run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
    LLM llm(ec);
    Outcome r;
    for (const RequestOutput& o : llm.generate(prompts, greedy(max_tokens))) {
      r.tokens.push_back(o.token_ids);
      r.top_logprobs.emplace_back();
      for (const auto& step : o.logprobs) r.top_logprobs.back().push_back(step.at(0).logprob);
    }
    const RunnerStats stats = llm.engine().runner_stats();
    if (stats.sparse_prefill) {
      r.counters = *stats.sparse_prefill;
      r.has_counters = true;
    }
    if (stats.offload) r.offloaded_prefills = stats.offload->steps.prefills;
    return r;
  }
  EngineConfig base_;
};

const std::vector<SparsePrefillPolicy> kPolicies = {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kMInference,
                                                    SparsePrefillPolicy::kFlexPrefill, SparsePrefillPolicy::kAvgPool};

// minference's threshold is a budget share: the full pattern takes every diagonal instead.
EngineConfig full(EngineConfig ec) {
  ec.sparse_prefill.threshold = 1.0;
  if (ec.sparse_prefill.policy == SparsePrefillPolicy::kMInference) ec.sparse_prefill.slash = 100000;
  return ec;
}

TEST_F(SparsePrefill, FullPatternGivesTheDenseResultOnBothPaths) {
  const auto prompts = random_prompts({70, 330, 505, 161}, 512, 1);
  for (bool offload : {false, true}) {
    EngineConfig dense_ec = base_;
    if (offload) with_offload(dense_ec);
    const Outcome dense = run(dense_ec, prompts, 12);
    EXPECT_FALSE(dense.has_counters);
    for (SparsePrefillPolicy p : kPolicies) {
      SCOPED_TRACE(::testing::Message() << sparse_prefill_policy_name(p) << (offload ? " offload" : ""));
      const Outcome got = run(full(sparse(p, 1.0, offload)), prompts, 12);
      EXPECT_EQ(got.tokens, dense.tokens);
      EXPECT_EQ(got.top_logprobs, dense.top_logprobs);  // bit-identical, not just close
      ASSERT_TRUE(got.has_counters);
      EXPECT_GT(got.counters.sparse_layer_chunks, 0);
      EXPECT_GT(got.counters.dense_layer_chunks, 0);  // decode steps, and the short first chunks
      EXPECT_EQ(got.counters.attended_blocks, got.counters.causal_blocks);
      EXPECT_EQ(got.counters.attended_columns, 0);
      EXPECT_EQ(got.offloaded_prefills, offload ? 4 : 0);
    }
  }
}

TEST_F(SparsePrefill, LowThresholdsRunAttendFewerBlocksAndAreDeterministic) {
  const auto prompts = random_prompts({600, 420}, 512, 2);
  for (bool offload : {false, true}) {
    for (SparsePrefillPolicy p : kPolicies) {
      SCOPED_TRACE(::testing::Message() << sparse_prefill_policy_name(p) << (offload ? " offload" : ""));
      EngineConfig ec = sparse(p, 0.2, offload);
      if (p == SparsePrefillPolicy::kMInference) {  // the 30 sinks and 100 recent diagonals, and one more of each
        ec.sparse_prefill.threshold = 0;
        ec.sparse_prefill.vertical = 31;
        ec.sparse_prefill.slash = 101;
      }
      const Outcome a = run(ec, prompts, 10);
      EXPECT_GT(a.counters.sparse_layer_chunks, 0);
      EXPECT_LT(a.counters.attended_blocks * 10, a.counters.causal_blocks * 9);  // under 90% of the causal blocks
      EXPECT_EQ(a.tokens.size(), 2u);
      EXPECT_EQ(a.tokens[0].size(), 10u);
      const Outcome b = run(ec, prompts, 10);
      EXPECT_EQ(a.tokens, b.tokens);
      EXPECT_EQ(a.top_logprobs, b.top_logprobs);
      if (p == SparsePrefillPolicy::kMInference) {
        EXPECT_GT(a.counters.attended_columns, 0);
      }
    }
  }
}

// --sparse-prefill-budget: at most budget / block_size key blocks per (KV head, query block), whatever the threshold
// keeps, on both paths; a budget covering the context changes nothing.
TEST_F(SparsePrefill, ABlockBudgetBoundsTheAttendedBlocks) {
  const auto prompts = random_prompts({600, 420}, 512, 4);
  for (bool offload : {false, true}) {
    for (SparsePrefillPolicy p : {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kAvgPool}) {
      SCOPED_TRACE(::testing::Message() << sparse_prefill_policy_name(p) << (offload ? " offload" : ""));
      const EngineConfig free = sparse(p, 0.95, offload);
      EngineConfig capped = free, covering = free;
      capped.sparse_prefill.budget_tokens = 48;  // 3 blocks of 16
      covering.sparse_prefill.budget_tokens = 640;
      const Outcome a = run(free, prompts, 6), b = run(capped, prompts, 6), c = run(covering, prompts, 6);
      ASSERT_GT(b.counters.sparse_layer_chunks, 0);
      EXPECT_EQ(b.counters.sparse_layer_chunks, a.counters.sparse_layer_chunks);
      EXPECT_LT(b.counters.attended_blocks, a.counters.attended_blocks);
      EXPECT_LE(b.counters.attended_blocks, 3 * b.counters.rows);  // at most 3 per (KV head, query block)
      EXPECT_GT(a.counters.attended_blocks, 3 * a.counters.rows);  // ... where the threshold alone lists more
      EXPECT_EQ(c.counters.attended_blocks, a.counters.attended_blocks);
      EXPECT_EQ(c.tokens, a.tokens);
      EXPECT_EQ(b.tokens[0].size(), 6u);
    }
  }
}

TEST_F(SparsePrefill, DenseLayersAndShortContextsStayDense) {
  const auto prompts = random_prompts({300}, 512, 3);
  const Outcome dense = run(base_, prompts, 8);
  // Every layer dense: nothing sparse, the dense result.
  EngineConfig all_dense = sparse(SparsePrefillPolicy::kAvgPool, 0.2);
  all_dense.sparse_prefill.dense_layers = 3;
  Outcome got = run(all_dense, prompts, 8);
  EXPECT_EQ(got.counters.sparse_layer_chunks, 0);
  EXPECT_EQ(got.tokens, dense.tokens);
  EXPECT_EQ(got.top_logprobs, dense.top_logprobs);
  // Contexts below min_tokens: nothing sparse.
  EngineConfig long_only = sparse(SparsePrefillPolicy::kAvgPool, 0.2);
  long_only.sparse_prefill.min_tokens = 400;
  got = run(long_only, prompts, 8);
  EXPECT_EQ(got.counters.sparse_layer_chunks, 0);
  EXPECT_EQ(got.tokens, dense.tokens);
  // Two dense layers of three: the 300-token prompt's chunks (160 + 140 tokens, contexts 160 and 300) go sparse in
  // the last layer only.
  EngineConfig last_layer = sparse(SparsePrefillPolicy::kAvgPool, 0.2);
  last_layer.sparse_prefill.dense_layers = 2;
  got = run(last_layer, prompts, 8);
  EXPECT_EQ(got.counters.sparse_layer_chunks, 2);
}

// Issue 46: several prompts prefilled in one step (what a busy scheduler, or `eval` queueing every sample, does) used
// to stay dense, while the offload path prefills one prompt per step and went sparse; the resident run then measured
// dense attention under the sparse policy's name (the "avgpool is right on the GPU cache, loses answers over offload"
// report). Now each qualifying chunk of a step goes sparse on its own: whole prompts in one step give exactly the
// offload path's tokens and logprobs (same chunks, same patterns), for every policy, and every prompt's prefill is
// counted sparse in every layer.
TEST_F(SparsePrefill, PromptsPrefilledInOneStepGoSparseLikeTheOffloadPath) {
  const auto prompts = random_prompts({300, 420, 250, 40}, 512, 7);  // the 40-token one stays below min_tokens
  EngineConfig batched_base = base_;
  batched_base.scheduler.max_num_seqs = 8;
  batched_base.scheduler.max_num_batched_tokens = 1024;  // every prompt whole in the first step
  for (SparsePrefillPolicy p : kPolicies) {
    for (int64_t budget : {int64_t{0}, int64_t{48}}) {
      if (budget > 0 && p != SparsePrefillPolicy::kAvgPool && p != SparsePrefillPolicy::kXAttention) continue;
      SCOPED_TRACE(::testing::Message() << sparse_prefill_policy_name(p) << " budget " << budget);
      EngineConfig ec = sparse(p, 0.3);
      ec.scheduler = batched_base.scheduler;
      ec.sparse_prefill.budget_tokens = budget;
      if (p == SparsePrefillPolicy::kMInference) ec.sparse_prefill.slash = 101;
      const Outcome resident = run(ec, prompts, 6);
      EngineConfig off = ec;
      with_offload(off);
      const Outcome offloaded = run(off, prompts, 6);
      EXPECT_EQ(offloaded.offloaded_prefills, 4);
      EXPECT_EQ(resident.tokens, offloaded.tokens);
      EXPECT_EQ(resident.top_logprobs, offloaded.top_logprobs);
      // 3 layers x the 3 long prompts, on both paths; a sparse, not a full, pattern.
      EXPECT_EQ(resident.counters.sparse_layer_chunks, 9);
      EXPECT_EQ(offloaded.counters.sparse_layer_chunks, 9);
      EXPECT_EQ(resident.counters.attended_blocks, offloaded.counters.attended_blocks);
      EXPECT_LT(resident.counters.attended_blocks, resident.counters.causal_blocks);
    }
  }
}

// A step holding decodes, a long chunk and a short prompt after it: the decodes and the short prompt attend densely
// around the sparse chunk, and at the full pattern the step gives exactly the dense result.
TEST_F(SparsePrefill, AStepOfDecodesALongChunkAndAShortPromptSplitsPerSequence) {
  // Step 1: the 40-token prompt and the long one's first 120 tokens; then the short one decodes while the long one's
  // chunks follow, and the 30-token prompt joins behind a chunk once the budget leaves room.
  const auto prompts = random_prompts({40, 400, 30}, 512, 8);
  EngineConfig dense_ec = base_;
  dense_ec.scheduler.max_num_seqs = 4;
  const Outcome dense = run(dense_ec, prompts, 12);
  for (SparsePrefillPolicy p : kPolicies) {
    SCOPED_TRACE(sparse_prefill_policy_name(p));
    EngineConfig ec = full(sparse(p, 1.0));
    ec.scheduler.max_num_seqs = 4;
    const Outcome got = run(ec, prompts, 12);
    EXPECT_EQ(got.tokens, dense.tokens);
    EXPECT_EQ(got.top_logprobs, dense.top_logprobs);
    // The long prompt's three chunks (120 tokens beside the 40-token prompt, then 159 and 121 beside a decode: contexts
    // 120, 279 and 400; the last step also prefills the 30-token prompt, densely), in every layer.
    EXPECT_EQ(got.counters.sparse_layer_chunks, 9);
    EXPECT_EQ(got.counters.attended_blocks, got.counters.causal_blocks);
  }
}

TEST_F(SparsePrefill, AChunkAfterDecodesInAMixedStepGoesSparse) {
  // Step 1 prefills the short prompt (dense: its context is below min_tokens) and the long one's first chunk; then the
  // short one decodes while the long one's chunks follow in the same steps: decodes dense, the chunk sparse.
  const auto prompts = random_prompts({40, 400}, 512, 6);
  EngineConfig dense_ec = base_;
  dense_ec.scheduler.max_num_seqs = 4;
  const Outcome dense = run(dense_ec, prompts, 12);
  for (SparsePrefillPolicy p : kPolicies) {
    SCOPED_TRACE(sparse_prefill_policy_name(p));
    EngineConfig ec = full(sparse(p, 1.0));
    ec.scheduler.max_num_seqs = 4;
    const Outcome got = run(ec, prompts, 12);
    EXPECT_EQ(got.tokens, dense.tokens);
    EXPECT_EQ(got.top_logprobs, dense.top_logprobs);
    EXPECT_GE(got.counters.sparse_layer_chunks, 3);  // at least one mixed step's chunk, in every layer
    EXPECT_EQ(got.counters.attended_blocks, got.counters.causal_blocks);
    EngineConfig low = sparse(p, 0.2);
    low.scheduler.max_num_seqs = 4;
    if (p == SparsePrefillPolicy::kMInference) low.sparse_prefill.slash = 101;
    const Outcome a = run(low, prompts, 12), b = run(low, prompts, 12);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_GE(a.counters.sparse_layer_chunks, 3);
    EXPECT_LT(a.counters.attended_blocks, a.counters.causal_blocks);
  }
}

TEST_F(SparsePrefill, WorksBesideQuestSparseDecode) {
  const auto prompts = random_prompts({400, 250}, 512, 5);
  const Outcome dense = run(base_, prompts, 16);
  EngineConfig both = full(sparse(SparsePrefillPolicy::kXAttention, 1.0));
  both.sparse.policy = "quest";
  both.sparse.budget_tokens = 640;  // covers the context: Quest's decode is dense too
  LLM llm(both);
  const auto outs = llm.generate(prompts, greedy(16));
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i].token_ids, dense.tokens[i]);
  const RunnerStats stats = llm.engine().runner_stats();
  const std::optional<SparseDecodeCounters>& quest = stats.sparse_decode;
  const std::optional<SparsePrefillCounters>& prefill = stats.sparse_prefill;
  ASSERT_TRUE(quest && prefill);
  EXPECT_GT(quest->sparse_layer_steps, 0);
  EXPECT_GT(prefill->sparse_layer_chunks, 0);
  // Offloaded: the sparse decode policy keeps its page metadata from the prefill, the chunks go sparse.
  with_offload(both);
  const Outcome off = run(both, prompts, 16);
  EXPECT_EQ(off.tokens, dense.tokens);
  EXPECT_EQ(off.offloaded_prefills, 2);
  EXPECT_GT(off.counters.sparse_layer_chunks, 0);
}

TEST_F(SparsePrefill, RefusesImpossibleConfigurations) {
  EXPECT_THROW(parse_sparse_prefill_policy("xattn"), Error);
  for (SparsePrefillPolicy p : kPolicies) EXPECT_EQ(parse_sparse_prefill_policy(sparse_prefill_policy_name(p)), p);
  EXPECT_EQ(parse_sparse_prefill_policy("dense"), SparsePrefillPolicy::kDense);
  auto refused = [&](const std::function<void(EngineConfig&)>& change, const std::string& words) {
    EngineConfig ec = sparse(SparsePrefillPolicy::kXAttention, 0.5);
    change(ec);
    try {
      ec.validate();
      ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.message()).find(words), std::string::npos) << e.message();
    }
  };
  refused([](EngineConfig& ec) { ec.sparse_prefill.threshold = 1.5; }, "sparse_prefill_threshold");
  refused([](EngineConfig& ec) { ec.sparse_prefill.threshold = -0.1; }, "sparse_prefill_threshold");
  refused([](EngineConfig& ec) { ec.sparse_prefill.dense_layers = -1; }, "sparse_prefill_dense_layers");
  refused([](EngineConfig& ec) { ec.sparse_prefill.min_tokens = 0; }, "sparse_prefill_min_tokens");
  refused([](EngineConfig& ec) { ec.sparse_prefill.block_size = 0; }, "sparse_prefill_block_size");
  refused([](EngineConfig& ec) { ec.sparse_prefill.stride = 3; }, "sparse_prefill_stride 3");  // 3 !| 16
  refused(
      [](EngineConfig& ec) {
        ec.sparse_prefill.policy = SparsePrefillPolicy::kMInference;
        ec.sparse_prefill.vertical = -1;
      },
      "sparse_prefill_vertical");
  refused(
      [](EngineConfig& ec) {
        ec.sparse_prefill.policy = SparsePrefillPolicy::kFlexPrefill;
        ec.sparse_prefill.tau = -1;
      },
      "sparse_prefill_tau");
  refused([](EngineConfig& ec) { ec.sparse_prefill.budget_tokens = -1; }, "sparse_prefill_budget must be >= 0");
  refused([](EngineConfig& ec) { ec.sparse_prefill.budget_tokens = 256, ec.sparse_prefill.threshold = 1.0; },
          "sparse_prefill_budget needs a sparse_prefill_threshold below 1");
  refused(
      [](EngineConfig& ec) {
        ec.sparse_prefill.policy = SparsePrefillPolicy::kMInference;
        ec.sparse_prefill.budget_tokens = 256;
      },
      "sparse_prefill_budget bounds xattention and avgpool");
  // Every policy has a CUDA estimator: none is refused on the CUDA backend (validate needs no GPU).
  for (SparsePrefillPolicy p : {SparsePrefillPolicy::kDense, SparsePrefillPolicy::kAvgPool,
                                SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kMInference,
                                SparsePrefillPolicy::kFlexPrefill}) {
    EngineConfig cuda = sparse(p, 0.5);
    cuda.model.backend = Backend::kCuda;
    EXPECT_NO_THROW(cuda.validate()) << sparse_prefill_policy_name(p);
  }
  // An engine is refused the same way (the CPU backend builds it, so a bad knob fails at construction).
  EngineConfig bad = sparse(SparsePrefillPolicy::kXAttention, 0.5);
  bad.sparse_prefill.stride = 5;
  EXPECT_THROW({ LLM llm(bad); }, Error);
}

}  // namespace
}  // namespace nanovllm
