// The CUDA backend end to end on the tiny test models, against HF fp32 goldens and the CPU backend.
// The GPU runs bf16 weights and activations, so where two candidates are within bf16 noise of each
// other the greedy choice may flip. The rule: tokens must agree until the first difference, and there
// the GPU's token must be a near-tie in HF's logprobs (within kNearTie of HF's top-1). After that the
// continuations differ and are not compared. Logprobs of agreeing steps must be within kLogprobTol.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <cuda_runtime.h>

#include "nanovllm/llm/llm.h"
#include "nanovllm/llm/llm_engine.h"
#include "support/expect_error.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

// bf16 keeps 8 mantissa bits: a logit of magnitude ~10 carries ~0.04 of rounding; two layers of
// residual stream accumulate a few of those. Measured on an H200: logprob diffs of agreeing steps at most
// 0.046, every flip at an HF top-2 gap under 0.1 (bench/results/2026-11-21/h200-cuda-correctness.md).
constexpr double kNearTie = 0.1;
constexpr double kLogprobTol = 0.1;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Comparison {
  int64_t steps = 0, agreeing = 0;
  double max_logprob_diff = 0;
};

// Compares one generated continuation with HF's golden one under the near-tie rule.
void compare_with_golden(const RequestOutput& out, const nlohmann::json& golden, size_t prompt, Comparison& c) {
  const auto want = golden["greedy_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(out.token_ids.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    ++c.steps;
    const auto& top = golden["top_logprobs"][t];
    if (out.token_ids[t] == want[t]) {
      ++c.agreeing;
      const double diff = std::fabs(out.logprobs[t][0].logprob - golden["chosen_logprobs"][t].get<double>());
      c.max_logprob_diff = std::max(c.max_logprob_diff, diff);
      EXPECT_LE(diff, kLogprobTol) << "prompt " << prompt << " step " << t;
      continue;
    }
    double hf_logprob_of_ours = -1e30;
    for (const auto& e : top)
      if (e["id"].get<int32_t>() == out.token_ids[t]) hf_logprob_of_ours = e["logprob"].get<double>();
    EXPECT_GE(hf_logprob_of_ours, top[0]["logprob"].get<double>() - kNearTie)
        << "prompt " << prompt << " step " << t << ": GPU chose " << out.token_ids[t] << ", HF " << want[t]
        << " — not a near-tie";
    c.steps += static_cast<int64_t>(want.size() - t - 1);  // the rest is not comparable
    return;
  }
}

class CudaVsGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaVsGolden, GreedyMatchesHfAndCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const nlohmann::json golden = testing::load_golden(GetParam());
  ASSERT_FALSE(golden.is_null());
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : golden["prompts"]) prompts.push_back(p["prompt_ids"].get<std::vector<int32_t>>());
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = static_cast<int64_t>(golden["prompts"][0]["greedy_ids"].size());
  sp.logprobs = 1;

  EngineConfig ec;
  ec.model.path = testing::golden_model_dir(GetParam());
  ec.scheduler.max_num_batched_tokens = 512;
  ec.cache.num_kv_blocks = 256;
  ec.model.backend = Backend::kCuda;
  const auto gpu = LLM(ec).generate(prompts, sp);
  ec.model.backend = Backend::kCpu;
  const auto cpu = LLM(ec).generate(prompts, sp);

  Comparison c;
  int64_t identical_to_cpu = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    compare_with_golden(gpu[i], golden["prompts"][i], i, c);
    identical_to_cpu += gpu[i].token_ids == cpu[i].token_ids;
  }
  std::printf("%s: CUDA vs HF fp32: %lld/%lld steps agree before any near-tie flip, max |logprob diff| %.4f; "
              "%lld/%zu continuations identical to the CPU backend\n",
              GetParam().c_str(), static_cast<long long>(c.agreeing), static_cast<long long>(c.steps),
              c.max_logprob_diff, static_cast<long long>(identical_to_cpu), prompts.size());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaVsGolden, ::testing::ValuesIn(testing::golden_model_names()),
                         [](const auto& info) { return info.param; });

// The peaked tied model (the `tiny` preset with head_dim 64), on `backend`.
EngineConfig tied_tiny_config(Backend backend) {
  EngineConfig ec;
  ec.model.path = testing::tiny_model_dir("cuda-vs-cpu", {{"head_dim", 64}, {"num_key_value_heads", 1}}, 21);
  ec.cache.block_size = 16;
  ec.scheduler.max_num_batched_tokens = 256;
  ec.cache.num_kv_blocks = 128;
  ec.model.backend = backend;
  return ec;
}

// The peaked tied model: CPU and CUDA agree token for token.
TEST(CudaVsCpu, TiedTinyModelGivesIdenticalGreedyTokens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EngineConfig ec = tied_tiny_config(Backend::kCuda);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 15, 16, 17, 100, 129}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 31) % 512);
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 40;  // decodes cross block boundaries
  const auto gpu = LLM(ec).generate(prompts, sp);  // decode through CUDA graphs (buckets 1..8)
  ec.model.enforce_eager = true;
  const auto gpu_eager = LLM(ec).generate(prompts, sp);
  ec.model.backend = Backend::kCpu;
  const auto cpu = LLM(ec).generate(prompts, sp);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(gpu[i].token_ids, cpu[i].token_ids) << "prompt " << i;
    EXPECT_EQ(gpu_eager[i].token_ids, gpu[i].token_ids) << "prompt " << i;
  }
}

// A step of one sequence that fills the whole token budget packs the most inputs per token (ids, positions, slots and
// the DCA scale lengths: four ints a token); the staging buffers hold it and the tokens are the CPU backend's.
TEST(CudaVsCpu, OneSequenceFillingTheTokenBudgetFitsTheStagedInputs) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EngineConfig ec = tied_tiny_config(Backend::kCuda);
  ec.scheduler.max_num_seqs = 1;
  ec.model.max_model_len = 1024;  // few block-table ints to spare
  std::vector<int32_t> prompt;
  for (int i = 0; i < 3 * 256 + 5; ++i) prompt.push_back((i * 7919 + 13) % 512);  // three whole-budget chunks
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 8;
  const auto gpu = LLM(ec).generate({prompt}, sp);
  ec.model.backend = Backend::kCpu;
  const auto cpu = LLM(ec).generate({prompt}, sp);
  EXPECT_EQ(gpu[0].token_ids, cpu[0].token_ids);
}

// Async scheduling on the GPU (steps launched ahead, input ids fed from the previous step's samples on
// the device): the same tokens as scheduling after every step, with sequences stopping at stop ids and
// at different lengths, seeded temperature rows, and logprobs. The step after a stop keeps the stopped
// row (its token is dropped), so that step's batch may take another graph bucket: logprobs within bf16
// noise (kLogprobTol); the peaked model keeps the tokens identical.
TEST(CudaVsCpu, AsyncSchedulingGivesTheTokensOfSyncScheduling) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const EngineConfig ec = tied_tiny_config(Backend::kCuda);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int n : {3, 17, 40, 9, 64}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 131) % 512);
    prompts.push_back(p);
    SamplingParams sp;
    sp.temperature = n % 2 == 0 ? 0.7f : 0.0f;
    sp.seed = 1000 + n;
    sp.ignore_eos = true;
    sp.max_tokens = 20 + n / 2;
    sp.logprobs = 2;
    params.push_back(sp);
  }
  auto run = [&](bool async, int64_t* ahead) {
    EngineConfig c = ec;
    c.scheduler.async_scheduling = async;
    LLMEngine engine(c);
    std::map<int64_t, RequestOutput> out;
    for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(prompts[i], params[i]);
    while (engine.has_unfinished())
      for (RequestOutput& o : engine.step()) out[o.request_id] = std::move(o);
    *ahead = engine.step_stats().scheduled_ahead_steps;
    return out;
  };
  int64_t ahead = 0;
  const auto first = run(false, &ahead);
  for (size_t i : {0, 2}) params[i].stop_token_ids = {first.at(static_cast<int64_t>(i)).token_ids.at(6 + i)};
  const auto sync = run(false, &ahead);
  EXPECT_EQ(ahead, 0);
  const auto async = run(true, &ahead);
  EXPECT_GT(ahead, 15);
  ASSERT_EQ(async.size(), sync.size());
  for (const auto& [id, want] : sync) {
    EXPECT_EQ(async.at(id).token_ids, want.token_ids) << "request " << id;
    EXPECT_EQ(async.at(id).finish_reason, want.finish_reason) << "request " << id;
    ASSERT_EQ(async.at(id).logprobs.size(), want.logprobs.size());
    for (size_t t = 0; t < want.logprobs.size(); ++t)
      EXPECT_NEAR(async.at(id).logprobs[t][0].logprob, want.logprobs[t][0].logprob, kLogprobTol) << "request " << id;
  }
  EXPECT_EQ(sync.at(0).finish_reason, FinishReason::kStop);
  EXPECT_EQ(sync.at(2).finish_reason, FinishReason::kStop);
}

// Tensor parallel over two GPUs (NCCL, decode graphs per rank; the single KV head replicated on both
// ranks): the greedy tokens of one GPU, through graphs and eager. The peaked model keeps bf16 rounding
// (NCCL sums the two ranks' partials in another order than one GEMM) from flipping a token.
TEST(CudaTensorParallel, TwoGpusGiveTheOneGpuTokens) {
  int devices = 0;
  if (!have_gpu() || cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) GTEST_SKIP() << "needs 2 GPUs";
  EngineConfig ec = tied_tiny_config(Backend::kCuda);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 15, 16, 17, 100, 129}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 31) % 512);
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 40;
  const auto one = LLM(ec).generate(prompts, sp);
  ec.parallel.tensor_parallel_size = 2;
  const auto two = LLM(ec).generate(prompts, sp);
  ec.model.enforce_eager = true;
  const auto two_eager = LLM(ec).generate(prompts, sp);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(two[i].token_ids, one[i].token_ids) << "prompt " << i;
    EXPECT_EQ(two_eager[i].token_ids, one[i].token_ids) << "prompt " << i;
  }
  if (devices < 4) {  // more ranks than GPUs (4 divides the model's heads)
    ec.parallel.tensor_parallel_size = 4;
    testing::expect_error([&] { LLM llm(ec); }, {"tensor_parallel_size 4 needs 4 GPUs; this machine has"});
  }
}

// Two GPUs with the KV heads split across ranks (2 heads, one per rank) and head_dim 128, whose
// attention kernels raise their dynamic shared-memory limit past the 48 KiB default: the limit belongs to
// each device's context, so a process-wide "once" left rank 1 unable to launch them (issue #34's
// throughput run died in cudaLaunchKernelEx). Random weights make near-ties, so TP2 need only agree
// with TP1 on nearly every token (the #34 target is 99% over 64 steps on the 8B shape).
TEST(CudaTensorParallel, ShardedKvHeadsAndLargeSharedMemoryKernelsRunOnEveryRank) {
  int devices = 0;
  if (!have_gpu() || cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) GTEST_SKIP() << "needs 2 GPUs";
  EngineConfig ec = tied_tiny_config(Backend::kCuda);
  ec.model.path = testing::tiny_model_dir(
      "tp-kv2-d128", {{"head_dim", 128}, {"num_key_value_heads", 2}, {"num_attention_heads", 8}}, 5);
  ec.cache.num_kv_blocks = 512;
  const auto prompts = testing::random_prompts({1, 17, 64, 129, 200, 255, 256, 300, 33, 2, 90, 150}, 512, 3);
  const auto sp = testing::greedy(48);
  const auto one = LLM(ec).generate(prompts, sp);
  ec.parallel.tensor_parallel_size = 2;
  const auto two = LLM(ec).generate(prompts, sp);
  int64_t same = 0, total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(two[i].token_ids.size(), one[i].token_ids.size());
    size_t k = 0;  // greedy streams agree up to their first divergence, then need not
    while (k < one[i].token_ids.size() && two[i].token_ids[k] == one[i].token_ids[k]) ++k;
    same += static_cast<int64_t>(k);
    total += static_cast<int64_t>(one[i].token_ids.size());
  }
  EXPECT_GE(same, total * 9 / 10) << same << " of " << total << " tokens before the first divergences";
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// Quest sparse decode on the GPU, end to end on the peaked tied model: with a budget covering every
// context the tokens are the dense GPU run's; with a 64-token budget (4 pages of 16: sink, one selected,
// two recent) the 64-, 100- and 129-token prompts decode sparsely, and the tokens equal the GPU's eager run
// (the decode graphs capture the policy's kernels) and, up to bf16 near-ties, the CPU backend's Quest run.
TEST(CudaSparseDecode, QuestGivesTheCpuTokensThroughGraphsAndEager) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  EngineConfig ec = tied_tiny_config(Backend::kCuda);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 17, 64, 100, 129}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 31) % 512);
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 40;
  const auto dense = LLM(ec).generate(prompts, sp);
  ec.sparse.policy = "quest";
  ec.sparse.budget_tokens = 1024;
  const auto covering = LLM(ec).generate(prompts, sp);
  ec.sparse.budget_tokens = 64;
  const auto gpu = LLM(ec).generate(prompts, sp);
  ec.model.enforce_eager = true;
  const auto gpu_eager = LLM(ec).generate(prompts, sp);
  ec.model.backend = Backend::kCpu;
  const auto cpu = LLM(ec).generate(prompts, sp);
  // The GPU scores pages from bf16 queries and keys, the CPU from fp32: two pages whose bounds nearly tie
  // can swap, and with one selected page that changes the attended set and, sometimes, a later token (seen:
  // the 64-token prompt, from token 26 of 40). A wrong selection or attention changes tokens from the
  // first sparse step, so: the first 16 tokens of every prompt, and all 40 of 4 of the 5 prompts.
  size_t whole = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(covering[i].token_ids, dense[i].token_ids) << "prompt " << i;
    EXPECT_EQ(gpu_eager[i].token_ids, gpu[i].token_ids) << "prompt " << i;
    ASSERT_EQ(gpu[i].token_ids.size(), cpu[i].token_ids.size());
    const std::vector<int32_t> gpu_head(gpu[i].token_ids.begin(), gpu[i].token_ids.begin() + 16);
    const std::vector<int32_t> cpu_head(cpu[i].token_ids.begin(), cpu[i].token_ids.begin() + 16);
    EXPECT_EQ(gpu_head, cpu_head) << "prompt " << i;
    whole += gpu[i].token_ids == cpu[i].token_ids;
  }
  EXPECT_GE(whole, prompts.size() - 1);
}

}  // namespace
}  // namespace nanovllm
