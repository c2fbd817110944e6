// Dual Chunk Attention through the whole engine on the CPU backend (docs/dual_chunk_attention.md): within one
// chunk it is the plain model, token for token and logprob for logprob; past it, it is what the model computes on
// every path — chunked or whole prefill, resident or offloaded KV, prefix caching on or off, preemption by
// recompute, tensor parallel, the sparse prefill and decode policies at covering settings — with the same tokens
// and logprobs; sparse settings engage and agree offloaded and resident; the combinations it does not run with are
// refused by name. Every test runs on two model families (DualChunk.*/Qwen2 and /Qwen3Moe): dca-tiny, a Qwen2 as the
// Qwen2.5-1M models are, and qwen3-moe-tiny with dca-tiny's chunks, as the Qwen3-2507 1M releases are (qk-norm,
// sparse MLP layers beside dense ones). The kernels' float64 reference is tests/kernels/dual_chunk_attention_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <ostream>
#include <string>

#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/sparse/decode_policy.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "support/expect_error.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

// Tokens and their top-5 logprobs: a wrong key in a long context rarely flips a greedy token of a tiny random
// model, but it always moves the logprobs.
struct Result {
  std::vector<int32_t> tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;
  int64_t cached = 0;
};

// Same tokens, logprobs within `tol` (0: bit for bit).
void expect_same(const std::vector<Result>& got, const std::vector<Result>& want, float tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << ", request " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << what;
    for (size_t s = 0; s < got[i].logprobs.size(); ++s)
      for (size_t k = 0; k < got[i].logprobs[s].size(); ++k) {
        EXPECT_EQ(got[i].logprobs[s][k].id, want[i].logprobs[s][k].id) << what << ", request " << i << " step " << s;
        EXPECT_NEAR(got[i].logprobs[s][k].logprob, want[i].logprobs[s][k].logprob, tol)
            << what << ", request " << i << " step " << s;
      }
  }
}

std::vector<Result> run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
  LLM llm(ec);
  std::vector<Result> r;
  for (const auto& o : llm.generate(prompts, testing::greedy(max_tokens, 5)))
    r.push_back({o.token_ids, o.logprobs, o.num_cached_tokens});
  return r;
}

// The parameter: a test model preset, given dca-tiny's chunks (chunk_size 64, local_size 16: chunks of 48 positions;
// logits scaled past 96 tokens). dca-tiny: 2 layers; qwen3-moe-tiny: 6, experts in layers 1 and 5.
class DualChunk : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    base_.model.path = model("e2e", nlohmann::json::object(), 31);
    base_.model.backend = Backend::kCpu;
    base_.model.max_model_len = 400;
    base_.cache.block_size = 8;
    base_.scheduler.max_num_batched_tokens = 512;
  }
  // The reference run: one request at a time, whole prefill, no prefix caching.
  std::vector<Result> reference(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) const {
    EngineConfig ec = base_;
    ec.cache.enable_prefix_caching = false;
    ec.scheduler.enable_chunked_prefill = false;
    std::vector<Result> out;
    for (const auto& p : prompts) out.push_back(run(ec, {p}, max_tokens)[0]);
    return out;
  }
  // The preset's checkpoint with those chunks, or with the dual_chunk_attention_config `override` gives (null: none),
  // plus the rest of `override` (a JSON merge patch of the preset's config.json).
  static std::filesystem::path model(const std::string& key, const nlohmann::json& override, uint64_t seed) {
    nlohmann::json patch = override;
    if (!patch.contains("dual_chunk_attention_config"))
      patch["dual_chunk_attention_config"] = {{"chunk_size", 64}, {"local_size", 16}, {"original_max_position_embeddings", 96}};
    return testing::preset_model_dir(GetParam(), key, patch, seed);
  }
  EngineConfig base_;
};

INSTANTIATE_TEST_SUITE_P(, DualChunk, ::testing::Values("dca-tiny", "qwen3-moe-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return std::string(info.param == "dca-tiny" ? "Qwen2" : "Qwen3Moe");
                         });

// Prompts spanning one to six chunks, some past the logit-scaling length (96), with decodes crossing chunk
// boundaries (48, 96, ...).
std::vector<std::vector<int32_t>> long_prompts() { return random_prompts({30, 47, 95, 150, 233}, 512, 7); }

TEST_P(DualChunk, WithinOneChunkItIsThePlainModelBitForBit) {
  // Same weights (a function of seed and tensor names), one config with a chunk larger than every context.
  EngineConfig dca = base_;
  dca.model.path = model(
      "one-chunk",
      {{"dual_chunk_attention_config",
        {{"chunk_size", 320}, {"local_size", 16}, {"original_max_position_embeddings", 320}}}},
      32);
  EngineConfig plain = base_;
  plain.model.path = model("plain", {{"dual_chunk_attention_config", nullptr}}, 32);
  const auto prompts = random_prompts({1, 17, 100, 250}, 512, 8);
  expect_same(run(dca, prompts, 40), run(plain, prompts, 40), 0.0f, "DCA within one chunk vs plain attention");

  // Past the first chunk the model is no longer the plain one: DCA runs (never plain attention in its place).
  EngineConfig chunks = base_;
  chunks.model.path = model("seed32", nlohmann::json::object(), 32);
  const auto a = run(chunks, {prompts[2]}, 4), b = run(plain, {prompts[2]}, 4);
  float diff = 0;  // the top-5 of the first step (a peaked model's top-1 logprob is ~0 either way)
  for (size_t k = 0; k < 5; ++k)
    diff = std::max(diff, std::abs(a[0].logprobs[0][k].logprob - b[0].logprobs[0][k].logprob));
  EXPECT_GT(diff, 1e-3f);
}

TEST_P(DualChunk, ChunkedPrefillAndBatchingMatchWholePrefill) {
  const auto prompts = long_prompts();
  const auto want = reference(prompts, 24);
  EngineConfig chunked = base_;
  chunked.cache.enable_prefix_caching = false;
  chunked.scheduler.max_num_batched_tokens = 40;  // prompts in chunks of at most 40, next to other requests' decodes
  chunked.scheduler.max_num_seqs = 8;
  // A prompt's keys carry the whole prompt's length factor in every chunk: any other choice changes the logprobs.
  expect_same(run(chunked, prompts, 24), want, 1e-5f, "chunked prefill");
  EngineConfig batched = base_;
  batched.cache.enable_prefix_caching = false;
  expect_same(run(batched, prompts, 24), want, 1e-5f, "one batch");
}

TEST_P(DualChunk, OffloadedMatchesResident) {
  const auto prompts = long_prompts();
  const auto want = reference(prompts, 24);
  EngineConfig off = base_;
  off.offload.enabled = true;
  off.offload.min_tokens = 1;  // every request offloaded
  off.offload.block_size = 16;
  off.offload.num_kv_buffers = 2;
  off.offload.max_num_seqs = 2;
  expect_same(run(off, prompts, 24), want, 1e-5f, "offloaded");
}

TEST_P(DualChunk, PrefixCachingMatchesAndSharesOnlyEqualLengthFactors) {
  // A 64-token shared prefix: prompts of 80 and 90 tokens (factor 1: they share blocks), of 150 and 170 (their
  // own factors: no sharing) and the 150-token one again (its own blocks back).
  const auto base = random_prompts({64}, 512, 9)[0];
  const auto tails = random_prompts({16, 26, 86, 106}, 512, 10);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& t : tails) {
    prompts.push_back(base);
    prompts.back().insert(prompts.back().end(), t.begin(), t.end());
  }
  prompts.push_back(prompts[2]);
  const auto want = reference(prompts, 16);
  LLM llm(base_);
  std::vector<Result> got;
  for (const auto& p : prompts) {
    const auto o = llm.generate({p}, testing::greedy(16, 5));
    got.push_back({o[0].token_ids, o[0].logprobs, o[0].num_cached_tokens});
  }
  expect_same(got, want, 1e-5f, "prefix caching");
  EXPECT_EQ(got[0].cached, 0);
  EXPECT_EQ(got[1].cached, 64) << "factor 1 prompts share the prefix";
  EXPECT_EQ(got[2].cached, 0) << "a 150-token prompt's keys carry its own factor";
  EXPECT_EQ(got[3].cached, 0) << "a 170-token prompt's keys carry its own factor";
  EXPECT_GE(got[4].cached, 144) << "the same 150-token prompt again";
}

TEST_P(DualChunk, PreemptionByRecomputeMatches) {
  const auto prompts = random_prompts({100, 60, 130}, 512, 11);
  const auto want = reference(prompts, 30);
  EngineConfig tight = base_;
  tight.cache.num_kv_blocks = 40;  // 320 slots: three sequences growing to 90-160 tokens cannot all stay
  tight.model.max_model_len = 200;
  LLM llm(tight);
  const auto outs = llm.generate(prompts, testing::greedy(30, 5));
  std::vector<Result> got;
  int64_t preemptions = 0;
  for (const auto& o : outs) {
    got.push_back({o.token_ids, o.logprobs, o.num_cached_tokens});
    preemptions += o.num_preemptions;
  }
  // A recomputed generated token keeps its own length factor (position + 1), not the prompt's.
  expect_same(got, want, 1e-5f, "preemption by recompute");
  EXPECT_GT(preemptions, 0) << "the block pool was meant to force preemption";
}

TEST_P(DualChunk, TensorParallelMatchesOneRank) {
  const auto prompts = random_prompts({150, 61}, 512, 12);
  const auto want = reference(prompts, 12);
  EngineConfig tp = base_;
  tp.parallel.tensor_parallel_size = 2;  // each rank one KV head, two query heads
  expect_same(run(tp, prompts, 12), want, 1e-4f, "tensor parallel 2");
}

// The sparse policies with DCA (docs/sparse_attention.md, "With Dual Chunk Attention"): every prefill estimator at its
// full threshold and a Quest budget covering the context give dense DCA's tokens and logprobs bit for bit, resident and
// offloaded (each against the dense run of the same path); at real sparsity they engage (fewer blocks and keys than
// dense) and the offloaded path gives the resident one's tokens.
struct SparseRun {
  std::vector<Result> results;
  SparsePrefillCounters prefill;
  SparseDecodeCounters decode;
};

SparseRun run_sparse(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
  LLM llm(ec);
  SparseRun r;
  for (const auto& o : llm.generate(prompts, testing::greedy(max_tokens, 5)))
    r.results.push_back({o.token_ids, o.logprobs, o.num_cached_tokens});
  const RunnerStats stats = llm.engine().runner_stats();
  if (stats.sparse_prefill) r.prefill = *stats.sparse_prefill;
  if (stats.offload) {  // every request offloaded: the offload lane's policy decoded
    if (stats.offload->sparse_decode) r.decode = *stats.offload->sparse_decode;
  } else if (stats.sparse_decode) {
    r.decode = *stats.sparse_decode;
  }
  return r;
}

EngineConfig with_sparse(EngineConfig ec, SparsePrefillPolicy policy, bool quest, bool covering) {
  ec.cache.enable_prefix_caching = false;
  ec.sparse_prefill.policy = policy;
  ec.sparse_prefill.block_size = 16;  // divides the chunk of 48
  ec.sparse_prefill.min_tokens = 64;
  ec.sparse_prefill.stride = 4;
  ec.sparse_prefill.last_q = 16;
  ec.sparse_prefill.min_budget = 16;
  if (covering) {
    ec.sparse_prefill.threshold = 1.0;
    ec.sparse_prefill.slash = 100000;  // minference: every diagonal
  } else if (policy == SparsePrefillPolicy::kMInference) {
    ec.sparse_prefill.vertical = 31;
    ec.sparse_prefill.slash = 101;
  } else {
    ec.sparse_prefill.threshold = 0.5;
  }
  if (quest) {
    ec.sparse.policy = "quest";
    ec.sparse.budget_tokens = covering ? 512 : 32;  // every page of a 400-token context, or 4 pages of 8
  }
  return ec;
}

EngineConfig offloaded(EngineConfig ec) {
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.offload.block_size = 8;  // the Quest page: the resident cache's block
  ec.offload.max_num_seqs = 2;
  return ec;
}

TEST_P(DualChunk, SparsePoliciesAtCoveringSettingsGiveDenseDcaBitForBit) {
  const auto prompts = random_prompts({95, 150, 233}, 512, 13);  // two to five chunks: intra, successive, inter keys
  EngineConfig dense = base_;
  dense.cache.enable_prefix_caching = false;
  for (bool offload : {false, true}) {
    const EngineConfig path = offload ? offloaded(dense) : dense;
    const auto want = run(path, prompts, 20);
    for (SparsePrefillPolicy policy : {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kMInference,
                                       SparsePrefillPolicy::kFlexPrefill, SparsePrefillPolicy::kAvgPool}) {
      const SparseRun got = run_sparse(with_sparse(path, policy, /*quest=*/true, /*covering=*/true), prompts, 20);
      const std::string what = std::string(sparse_prefill_policy_name(policy)) + " + quest, covering, " +
                               (offload ? "offloaded" : "resident");
      expect_same(got.results, want, 0.0f, what.c_str());
      EXPECT_GT(got.prefill.sparse_layer_chunks, 0) << what;
      EXPECT_EQ(got.prefill.attended_blocks, got.prefill.causal_blocks) << what;
      EXPECT_GT(got.decode.sparse_layer_steps, 0) << what;
    }
  }
}

TEST_P(DualChunk, SparsePoliciesGoSparseAndOffloadedMatchesResident) {
  const auto prompts = random_prompts({150, 233}, 512, 14);
  for (SparsePrefillPolicy policy : {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kMInference,
                                     SparsePrefillPolicy::kFlexPrefill, SparsePrefillPolicy::kAvgPool}) {
    const EngineConfig resident = with_sparse(base_, policy, /*quest=*/true, /*covering=*/false);
    const SparseRun a = run_sparse(resident, prompts, 20), b = run_sparse(offloaded(resident), prompts, 20);
    const std::string what = std::string(sparse_prefill_policy_name(policy)) + " + quest";
    EXPECT_GT(a.prefill.sparse_layer_chunks, 0) << what;
    EXPECT_LT(a.prefill.attended_blocks, a.prefill.causal_blocks) << what;
    EXPECT_GT(a.decode.sparse_layer_steps, 0) << what;
    EXPECT_LT(a.decode.attended_keys, a.decode.context_keys) << what;
    EXPECT_LT(b.prefill.attended_blocks, b.prefill.causal_blocks) << what;
    EXPECT_LT(b.decode.attended_keys, b.decode.context_keys) << what;
    expect_same(b.results, a.results, 1e-5f, (what + ": offloaded vs resident").c_str());
  }
}

TEST_P(DualChunk, CombinationsItDoesNotRunAreRefusedByName) {
  // Pattern blocks straddling a chunk (48 positions) would pool keys of two chunk relations.
  EngineConfig straddle = base_;
  straddle.sparse_prefill.policy = SparsePrefillPolicy::kMInference;
  straddle.sparse_prefill.block_size = 32;
  nanovllm::testing::expect_error([&] { LLM llm(straddle); },
                                  {"--sparse-prefill-block-size 32", "chunk_size - local_size = 48"});
  // The CUDA kernels score whole 128-key tiles with one rotation (checked before any GPU is looked for).
  EngineConfig cuda = base_;
  cuda.model.backend = Backend::kCuda;
  nanovllm::testing::expect_error([&] { LLM llm(cuda); }, {"chunk_size - local_size = 48", "multiple of 128"});
}

}  // namespace
}  // namespace nanovllm
