// Layer-wise CPU KV offload on the GPU: copy streams, events and pinned memory for real. Offload on and
// off run the same bf16 kernels in the same chunks over the same keys (only the cache plumbing differs),
// so greedy tokens must be identical and logprobs equal to bf16 noise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>

#include <cuda_runtime.h>

#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

std::vector<int32_t> random_prompt(int64_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return p;
}

SamplingParams greedy(int64_t max_tokens) { return testing::greedy(max_tokens, 1); }

// Same tokens; chosen-token logprobs within `tol` (bf16 runs of the same kernels: expect ~0).
void expect_same(const std::vector<RequestOutput>& a, const std::vector<RequestOutput>& b, double tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token_ids, b[i].token_ids) << what << ", request " << i;
    if (a[i].token_ids != b[i].token_ids) continue;
    double worst = 0;
    for (size_t t = 0; t < a[i].logprobs.size(); ++t)
      worst = std::max(worst, std::fabs(static_cast<double>(a[i].logprobs[t][0].logprob - b[i].logprobs[t][0].logprob)));
    EXPECT_LE(worst, tol) << what << ", request " << i;
  }
}

EngineConfig tiny_config(int64_t max_model_len, const std::string& preset = "tiny") {
  EngineConfig ec;
  ec.model.path = testing::preset_model_dir(
      preset, "offload-hd64", {{"num_hidden_layers", 4}, {"head_dim", 64}, {"max_position_embeddings", 1 << 18}}, 31);
  ec.model.backend = Backend::kCuda;
  ec.cache.block_size = 16;
  ec.model.max_model_len = max_model_len;
  ec.scheduler.max_num_batched_tokens = 1024;  // both paths prefill in 1024-token chunks
  ec.cache.num_kv_blocks = 1024;  // 16K tokens of paged cache: the 4K prompts fit with offload off
  ec.cache.enable_prefix_caching = false;
  return ec;
}

TEST(CudaOffload, MatchesGpuCacheAt4KTokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const EngineConfig plain = tiny_config(8192);
  // 4K-token prompts: exactly a host block multiple, one past it, one short; 70 tokens of decode cross
  // two 32-token host blocks from a partial one.
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(4096, 512, 1), random_prompt(4097, 512, 2),
                                                     random_prompt(4001, 512, 3)};
  // One prompt at a time, as the offload lane runs them: the same GEMM shapes on both paths.
  std::vector<RequestOutput> reference;
  {
    LLM llm(plain);
    for (const auto& p : prompts) reference.push_back(llm.generate({p}, greedy(70))[0]);
  }
  for (int64_t nb : {1, 2, 4}) {
    EngineConfig ec = plain;
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;
    ec.offload.block_size = 32;
    ec.offload.num_kv_buffers = nb;
    LLM llm(ec);
    expect_same(llm.generate(prompts, greedy(70)), reference, 1e-2, "num_kv_buffers " + std::to_string(nb));
    EXPECT_EQ(llm.engine().runner_stats().offload->steps.prefills, 3);
  }
}

// --kv-cache-dtype fp8 (docs/kv_cache.md) through the dense offload path: the ring slots, host pools and decode
// buffers move codes and their row scales, and the GPU-resident fp8 cache runs the same kernels over the same codes
// (same prefill chunks, same key order), so the tokens are the resident run's. head_dim 64 (GQA 2) and 128 (GQA 4,
// the 4B shape's), prompts ending on, past and short of a host block, decode crossing host blocks, 1 and 4 layer buffers;
// the engine captures its decode graphs (batch buckets up to 256) over a small fp8 paged cache, as bench offload
// does. (Session 33: the 128K dense fp8 offload bench aborted with an illegal address within its first 12 s.)
TEST(CudaOffload, Fp8KvCacheMatchesTheResidentFp8Cache) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t hd : {64, 128}) {
    EngineConfig plain = tiny_config(8192);
    nlohmann::json shape = {{"num_hidden_layers", 4}, {"head_dim", hd}, {"max_position_embeddings", 1 << 18}};
    if (hd == 128) shape.update({{"num_attention_heads", 8}, {"num_key_value_heads", 2}});  // GQA 4, as the 4B's
    plain.model.path = testing::preset_model_dir("tiny", hd == 64 ? "offload-hd64" : "offload-hd128-gqa4", shape, 31);
    plain.cache.kv_cache_dtype = "fp8";
    const std::vector<std::vector<int32_t>> prompts = {random_prompt(2048, 512, 11), random_prompt(2049, 512, 12),
                                                       random_prompt(700, 512, 13)};
    std::vector<RequestOutput> reference;
    {
      LLM llm(plain);
      for (const auto& p : prompts) reference.push_back(llm.generate({p}, greedy(70))[0]);
    }
    for (const int64_t nb : {1, 4}) {
      EngineConfig ec = plain;
      ec.offload.enabled = true;
      ec.offload.min_tokens = 1;
      ec.offload.block_size = 32;
      ec.offload.num_kv_buffers = nb;
      ec.cache.num_kv_blocks = 64;  // bench offload's small paged cache (its decode graphs are captured over it)
      LLM llm(ec);
      expect_same(llm.generate(prompts, greedy(70)), reference, 1e-2,
                  "fp8, head_dim " + std::to_string(hd) + ", num_kv_buffers " + std::to_string(nb));
      EXPECT_EQ(llm.engine().runner_stats().offload->steps.prefills, 3);
    }
  }
}

// GLM-4 (q/k/v bias, interleaved RoPE on half the head) through the offload path: the same tokens as the
// GPU cache.
TEST(CudaOffload, Glm4MatchesGpuCache) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const EngineConfig plain = tiny_config(8192, "glm4-tiny");
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(4097, 512, 7), random_prompt(1500, 512, 8)};
  std::vector<RequestOutput> reference;
  {
    LLM llm(plain);
    for (const auto& p : prompts) reference.push_back(llm.generate({p}, greedy(40))[0]);
  }
  EngineConfig ec = plain;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.offload.block_size = 32;
  LLM llm(ec);
  expect_same(llm.generate(prompts, greedy(40)), reference, 1e-2, "glm4 offload");
  EXPECT_EQ(llm.engine().runner_stats().offload->steps.prefills, 2);
}

TEST(CudaOffload, SequentialRequestsMatchEachRunAlone) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EngineConfig ec = tiny_config(8192);
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.offload.block_size = 64;
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(3000, 512, 4), random_prompt(200, 512, 5),
                                                     random_prompt(5000, 512, 6)};
  LLM llm(ec);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto together = llm.generate({prompts[i]}, greedy(40));
    const auto alone = LLM(ec).generate({prompts[i]}, greedy(40));
    expect_same(together, alone, 1e-2, "request " + std::to_string(i));
  }
}

// Quest sparse decode over offload: only the selected pages come over PCIe (or from the hot-page cache),
// and they are the pages the GPU-resident sparse path attends, so the tokens are that path's, with and
// without the cache; the cache serves a part of the pages.
TEST(CudaOffload, SparseDecodeMatchesTheResidentSparsePath) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EngineConfig resident = tiny_config(8192);
  resident.sparse.policy = "quest";
  resident.sparse.budget_tokens = 512;  // 32 pages of 16 of 3-5K-token contexts
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(4097, 512, 11), random_prompt(3001, 512, 12)};
  std::vector<RequestOutput> reference;
  {
    LLM llm(resident);
    for (const auto& p : prompts) reference.push_back(llm.generate({p}, greedy(60))[0]);
  }
  for (int64_t cache_tokens : {int64_t{-1}, int64_t{0}}) {
    EngineConfig ec = resident;
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;
    ec.offload.block_size = 32;
    ec.sparse.gpu_cache_tokens = cache_tokens;
    LLM llm(ec);
    expect_same(llm.generate(prompts, greedy(60)), reference, 1e-2,
                "sparse offload, cache tokens " + std::to_string(cache_tokens));
    const PageCacheCounters c = llm.engine().offload_page_cache();
    EXPECT_GT(c.misses, 0);
    if (cache_tokens != 0) {
      EXPECT_GT(c.hits, c.misses) << "a stable selection should mostly hit";
    } else {
      EXPECT_EQ(c.hits, 0);
    }
    EXPECT_EQ(llm.engine().runner_stats().offload->steps.last_step_h2d_bytes, 0);  // no whole-layer loads
  }
}

// Several offloaded requests at once (offload max_num_seqs 3, four requests: a lane is reused), dense and
// with Quest: each request's tokens are the GPU cache's run alone (the resident sparse path's for Quest)
// until a bf16 near-tie. Batched decode rows run other GEMV shapes than one row, so the last bits of a
// logit may differ; a token may then differ only where the reference's best two logprobs lie within 0.05.
TEST(CudaOffload, ConcurrentRequestsMatchTheGpuCacheRunAlone) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(4096, 512, 21), random_prompt(3001, 512, 22),
                                                     random_prompt(4097, 512, 23), random_prompt(1500, 512, 24)};
  for (const bool quest : {false, true}) {
    EngineConfig plain = tiny_config(8192);
    if (quest) {
      plain.sparse.policy = "quest";
      plain.sparse.budget_tokens = 512;
    }
    std::vector<RequestOutput> reference;
    {
      LLM llm(plain);
      for (const auto& p : prompts) reference.push_back(llm.generate({p}, testing::greedy(50, 2))[0]);
    }
    EngineConfig ec = plain;
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;
    ec.offload.block_size = 32;
    ec.offload.max_num_seqs = 3;
    LLM llm(ec);
    const std::vector<RequestOutput> got = llm.generate(prompts, testing::greedy(50, 2));
    ASSERT_EQ(got.size(), reference.size());
    int64_t equal = 0, total = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto& want = reference[i];
      size_t t = 0;
      while (t < want.token_ids.size() && got[i].token_ids[t] == want.token_ids[t]) ++t;
      equal += static_cast<int64_t>(t);
      total += static_cast<int64_t>(want.token_ids.size());
      if (t == want.token_ids.size()) continue;
      const float gap = want.logprobs[t][0].logprob - want.logprobs[t][1].logprob;
      EXPECT_LT(gap, 0.05f) << (quest ? "quest" : "dense") << ", request " << i << " differs at token " << t
                            << " where the reference's margin is " << gap;
    }
    std::printf("%s: %lld of %lld tokens equal before the first difference\n", quest ? "quest" : "dense",
                static_cast<long long>(equal), static_cast<long long>(total));
    const OffloadStats st = llm.engine().runner_stats().offload->steps;
    EXPECT_EQ(st.prefills, 4);
    EXPECT_LT(st.decode_steps, st.decode_tokens);  // batched
  }
}

// Sparse prefill on CUDA (each policy's estimator, then the block-sparse kernel): the full pattern (a threshold of 1;
// minference: every diagonal) keeps every causal block, so the tokens are the dense ones, on the normal path
// (1024-token chunks) and in the offload prefill; a low threshold (minference: the 30 sinks and 100 recent diagonals
// and one more of each) really goes sparse (the counters read the GPU patterns) and still generates.
TEST(CudaOffload, SparsePrefillFullThresholdGivesTheDenseTokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const EngineConfig plain = tiny_config(8192);
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(4097, 512, 21), random_prompt(3001, 512, 22)};
  std::vector<RequestOutput> reference;
  {
    LLM llm(plain);
    for (const auto& p : prompts) reference.push_back(llm.generate({p}, greedy(24))[0]);
  }
  for (SparsePrefillPolicy policy : {SparsePrefillPolicy::kAvgPool, SparsePrefillPolicy::kXAttention,
                                     SparsePrefillPolicy::kMInference, SparsePrefillPolicy::kFlexPrefill}) {
    for (bool offload : {false, true}) {
      const std::string what = std::string(sparse_prefill_policy_name(policy)) + (offload ? ", offload" : "");
      EngineConfig ec = plain;
      ec.sparse_prefill.policy = policy;
      ec.sparse_prefill.min_tokens = 1024;
      ec.offload.enabled = offload;
      ec.offload.min_tokens = offload ? 1 : 0;
      ec.offload.block_size = 32;
      ec.sparse_prefill.count_blocks = true;  // read the GPU patterns back: the density is asserted below
      for (bool full : {true, false}) {
        const bool minference = policy == SparsePrefillPolicy::kMInference;
        ec.sparse_prefill.threshold = full ? 1.0 : (minference ? 0.0 : 0.5);
        ec.sparse_prefill.vertical = minference && !full ? 31 : 0;
        ec.sparse_prefill.slash = minference ? (full ? 100000 : 101) : 0;
        // minference: blocks of 16, so the 30 sink columns reach past block 0 and some become column lists
        ec.sparse_prefill.block_size = minference ? 16 : 128;
        LLM llm(ec);
        std::vector<RequestOutput> got;
        for (const auto& p : prompts) got.push_back(llm.generate({p}, greedy(24))[0]);
        const std::optional<SparsePrefillCounters> c = llm.engine().runner_stats().sparse_prefill;
        ASSERT_TRUE(c.has_value()) << what;
        EXPECT_GT(c->sparse_layer_chunks, 0) << what;
        EXPECT_GT(c->causal_blocks, 0) << what;
        if (full) {
          EXPECT_EQ(c->attended_blocks, c->causal_blocks) << what << ": every causal block is listed";
          EXPECT_EQ(c->attended_columns, 0) << what;
          expect_same(got, reference, 1e-2, what);
        } else {
          EXPECT_GT(c->attended_blocks, 0) << what;
          EXPECT_LT(c->attended_blocks, c->causal_blocks) << what << ": a low threshold drops blocks";
          if (minference) {
            EXPECT_GT(c->attended_columns, 0) << what << ": columns outside the listed blocks";
          }
          for (const RequestOutput& o : got) EXPECT_EQ(o.token_ids.size(), 24u) << what;
        }
      }
    }
  }
}

// Issue 46 on CUDA: prompts prefilled together in one eager step each go sparse (the step is split per sequence from
// the packed inputs' host copy), as the offload path, which prefills one prompt per step, always did. Every policy: the
// two long prompts' chunks in every layer, not the short one's; the full pattern gives the dense tokens.
TEST(CudaOffload, SparsePrefillCoversEveryPromptOfABatchedStep) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EngineConfig plain = tiny_config(8192);
  plain.scheduler.max_num_batched_tokens = 8192;  // the three prompts whole in the first step
  // Long enough (27 and 24 blocks of 128) that a threshold of 0.5 leaves blocks out for every policy.
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(3500, 512, 31), random_prompt(3001, 512, 32),
                                                     random_prompt(600, 512, 33)};
  std::vector<RequestOutput> reference;
  {
    LLM llm(plain);
    reference = llm.generate(prompts, greedy(16));
  }
  for (SparsePrefillPolicy policy : {SparsePrefillPolicy::kAvgPool, SparsePrefillPolicy::kXAttention,
                                     SparsePrefillPolicy::kMInference, SparsePrefillPolicy::kFlexPrefill}) {
    for (bool full : {true, false}) {
      const std::string what = std::string(sparse_prefill_policy_name(policy)) + (full ? ", full" : ", 0.5");
      const bool minference = policy == SparsePrefillPolicy::kMInference;
      EngineConfig ec = plain;
      ec.sparse_prefill.policy = policy;
      ec.sparse_prefill.min_tokens = 1024;  // the 600-token prompt stays dense
      ec.sparse_prefill.count_blocks = true;
      ec.sparse_prefill.threshold = full ? 1.0 : (minference ? 0.0 : 0.5);
      ec.sparse_prefill.vertical = minference && !full ? 31 : 0;  // the 30 sinks and 100 recent diagonals, and one more
      ec.sparse_prefill.slash = minference ? (full ? 100000 : 101) : 0;
      ec.sparse_prefill.block_size = minference ? 16 : 128;
      LLM llm(ec);
      const std::vector<RequestOutput> got = llm.generate(prompts, greedy(16));
      const std::optional<SparsePrefillCounters> c = llm.engine().runner_stats().sparse_prefill;
      ASSERT_TRUE(c.has_value()) << what;
      EXPECT_EQ(c->sparse_layer_chunks, 4 * 2) << what << ": 4 layers x the two long prompts";
      if (full) {
        EXPECT_EQ(c->attended_blocks, c->causal_blocks) << what;
        expect_same(got, reference, 1e-2, what);
      } else {
        EXPECT_LT(c->attended_blocks, c->causal_blocks) << what;
      }
    }
  }
}

// The lead's long-context check: offload vs the GPU cache at 128K tokens on the tiny head_dim-64 model
// (its whole KV fits the GPU, so both paths can run), or a real checkpoint:
//   NANOVLLM_OFFLOAD_MODEL=/path/to/Qwen3-4B NANOVLLM_OFFLOAD_CONTEXT=131072
//   ./tests/test_cuda --gtest_also_run_disabled_tests --gtest_filter='*LongContext*'
TEST(CudaOffload, DISABLED_LongContextMatchesGpuCache) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const char* model = std::getenv("NANOVLLM_OFFLOAD_MODEL");
  const char* context = std::getenv("NANOVLLM_OFFLOAD_CONTEXT");
  const int64_t n = context ? std::atoll(context) : 131072;
  EngineConfig plain = tiny_config(n + 64);
  plain.cache.num_kv_blocks = 0;  // from gpu_memory_utilization
  plain.scheduler.max_num_batched_tokens = 8192;
  if (model) plain.model.path = model;
  const int vocab = model ? 1000 : 512;  // the tiny preset's vocabulary is 512
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(n, vocab, 7)};
  EngineConfig ec = plain;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.cache.num_kv_blocks = 64;
  std::vector<RequestOutput> offloaded;
  {
    LLM llm(ec);
    offloaded = llm.generate(prompts, greedy(48));
    const OffloadStats st = llm.engine().runner_stats().offload->steps;
    std::printf("offload: %lld decode steps, %.2f GB H2D, %.2f GB D2H, host pool %.1f s\n",
                static_cast<long long>(st.decode_steps), st.h2d_bytes / 1e9, st.d2h_bytes / 1e9, st.host_alloc_s);
  }
  const auto reference = LLM(plain).generate(prompts, greedy(48));
  expect_same(offloaded, reference, 1e-2, "context " + std::to_string(n));
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// Tensor parallel with offload (issue #34): each GPU offloads its own KV head (the tiny model's 2 KV heads,
// one per rank) through its own pinned pool and copy streams. Each rank runs the same kernels offloaded or
// resident (only the cache plumbing differs), so TP2 offloaded gives TP2 resident's tokens, dense and with
// Quest selecting each rank's pages (passed on 2 x H200, 2026-11-27).
TEST(CudaOffload, TwoGpusOffloadTheirOwnKvHeads) {
  int devices = 0;
  if (!have_gpu() || cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) GTEST_SKIP() << "needs 2 GPUs";
  const std::vector<std::vector<int32_t>> prompts = {random_prompt(4097, 512, 31), random_prompt(3001, 512, 32)};
  for (bool quest : {false, true}) {
    EngineConfig resident = tiny_config(8192);
    resident.parallel.tensor_parallel_size = 2;
    if (quest) {
      resident.sparse.policy = "quest";
      resident.sparse.budget_tokens = 512;
    }
    std::vector<RequestOutput> reference;
    {
      LLM llm(resident);
      for (const auto& p : prompts) reference.push_back(llm.generate({p}, greedy(50))[0]);
    }
    EngineConfig ec = resident;
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;
    ec.offload.block_size = 32;
    LLM llm(ec);
    expect_same(llm.generate(prompts, greedy(50)), reference, 1e-2, quest ? "TP2 Quest offload" : "TP2 offload");
    const OffloadStats steps = llm.engine().runner_stats().offload->steps;
    EXPECT_EQ(steps.prefills, 2);
    if (quest) {
      EXPECT_GT(llm.engine().offload_page_cache().misses, 0);  // selected pages came over PCIe
    } else {
      EXPECT_GT(steps.h2d_bytes, 0);  // whole layers came over PCIe
    }
  }
}

}  // namespace
}  // namespace nanovllm
