// Benchmark (DISABLED_, run by hand on the device machine): where the GPU time of a bs=1 decode step
// goes, graph replay and everything around it, from a CUPTI timeline of an engine's steady-state steps.
// NANOVLLM_STEP_TIMELINE_MODEL names the checkpoint (e.g. `nanovllm make-test-model --preset qwen3-0.6b`),
// NANOVLLM_STEP_TIMELINE_TP the tensor-parallel size (default 1; GPU 0's records are shown),
// NANOVLLM_STEP_TIMELINE_QUANTIZATION the weights' quantization (default auto; fp8 quantizes at load).
// Prints, for the last decode steps, every record outside the graph's layers (copies, the sampler,
// the feed kernel, the embedding and LM head) with its gap to the record before it, and one step's GPU
// time per kernel name with the idle gaps between records. The same for the offloaded Quest decode step
// (issue 30), of one or several long requests at once.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernel_timeline.h"
#include "nanovllm/llm/llm_engine.h"

namespace nanovllm {
namespace {

// Prints, for a timeline of whole decode steps (each opened by the embedding kernel), the step-to-step
// times, the records around the second-to-last step's start and end, and that step's GPU time per kernel
// name with the idle gaps between records.
void report_steps(const std::vector<cuda_test::KernelRecord>& recs) {
  ASSERT_FALSE(recs.empty());

  // Step boundaries: the embedding kernel opens each step's graph.
  std::vector<size_t> starts;
  for (size_t i = 0; i < recs.size(); ++i)
    if (cuda_test::short_kernel_name(recs[i].name).find("embedding") != std::string::npos) starts.push_back(i);
  ASSERT_GE(starts.size(), 3u);
  std::printf("%zu records, %zu steps; step-to-step (embedding start) us:", recs.size(), starts.size());
  for (size_t s = 1; s < starts.size(); ++s)
    std::printf(" %.1f", static_cast<double>(recs[starts[s]].start_ns - recs[starts[s - 1]].start_ns) / 1e3);
  std::printf("\n");
  // The second-to-last full step, from 12 records before its embedding to 12 after; the end of its graph
  // and what follows, up to the next embedding.
  const size_t a = starts[starts.size() - 2], b = starts[starts.size() - 1];
  auto print = [&](size_t i) {
    const auto& r = recs[i];
    const double gap = i > 0 ? (static_cast<double>(r.start_ns) - static_cast<double>(recs[i - 1].end_ns)) / 1e3 : 0.0;
    std::printf("  %-28s %8d | gap %7.2f us  dur %7.2f us  (t = %9.2f)\n", cuda_test::short_kernel_name(r.name).c_str(),
                r.grid, gap, static_cast<double>(r.end_ns - r.start_ns) / 1e3,
                (static_cast<double>(r.start_ns) - static_cast<double>(recs[a].start_ns)) / 1e3);
  };
  std::printf("step start:\n");
  for (size_t i = a >= 12 ? a - 12 : 0; i < a + 12 && i < recs.size(); ++i) print(i);
  std::printf("step end (up to the next step's embedding):\n");
  for (size_t i = b >= 24 ? b - 24 : 0; i <= b; ++i) print(i);
  // One step (embedding to embedding) by kernel name: count, GPU time, and the idle gaps between records.
  std::map<std::string, std::pair<int, double>> by_name;
  double busy_us = 0, idle_us = 0;
  for (size_t i = a; i < b; ++i) {
    const double dur = static_cast<double>(recs[i].end_ns - recs[i].start_ns) / 1e3;
    auto& e = by_name[cuda_test::short_kernel_name(recs[i].name)];
    e.first += 1;
    e.second += dur;
    busy_us += dur;
    if (i + 1 < recs.size() && recs[i + 1].start_ns > recs[i].end_ns)
      idle_us += static_cast<double>(recs[i + 1].start_ns - recs[i].end_ns) / 1e3;
  }
  std::printf("one step: %.1f us between embeddings, %.1f us of records (overlaps counted twice), %.1f us idle\n",
              static_cast<double>(recs[b].start_ns - recs[a].start_ns) / 1e3, busy_us, idle_us);
  for (const auto& [name, e] : by_name)
    std::printf("  %-32s %5d x  %9.1f us  (%.2f us each)\n", name.c_str(), e.first, e.second, e.second / e.first);
}

TEST(CudaStepTimelineBench, DISABLED_DecodeBatchOne) {
  const char* model = std::getenv("NANOVLLM_STEP_TIMELINE_MODEL");
  if (model == nullptr) GTEST_SKIP() << "set NANOVLLM_STEP_TIMELINE_MODEL";
  if (!cuda_test::KernelTimeline::available()) GTEST_SKIP() << "CUPTI not loadable (set NANOVLLM_CUPTI_LIB)";
  EngineConfig ec;
  ec.model.path = model;
  ec.model.backend = Backend::kCuda;
  ec.scheduler.max_num_seqs = 8;
  if (const char* tp = std::getenv("NANOVLLM_STEP_TIMELINE_TP")) ec.parallel.tensor_parallel_size = std::atoi(tp);
  if (const char* q = std::getenv("NANOVLLM_STEP_TIMELINE_QUANTIZATION")) ec.model.quantization = q;
  LLMEngine engine(ec);
  std::mt19937 rng(1);
  std::vector<int32_t> prompt(1024);
  for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % 1000);
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 64;
  engine.add_request(prompt, sp);
  for (int i = 0; i < 40; ++i) engine.step();  // prefill + warm decode steps
  cuda_test::KernelTimeline tl;
  tl.start();
  for (int i = 0; i < 8; ++i) engine.step();
  std::vector<cuda_test::KernelRecord> recs = tl.stop();
  while (engine.has_unfinished()) engine.step();
  std::erase_if(recs, [](const cuda_test::KernelRecord& r) { return r.device != 0; });
  report_steps(recs);
}

// The offloaded Quest decode step of NANOVLLM_STEP_TIMELINE_SEQS (default 1) requests of
// NANOVLLM_STEP_TIMELINE_CONTEXT (default 131000) tokens at once, budget 2048 in pages of 16: its kernels and
// copies, and the GPU's idle time between them (the host launching one kernel or copy after another).
// NANOVLLM_STEP_TIMELINE_KV_DTYPE sets the KV cache dtype (default auto); NANOVLLM_STEP_TIMELINE_FAST_PREFILL=1
// prefills with avgpool, budget 4096, layer 0 dense (the README's long-context configuration) to save time.
TEST(CudaStepTimelineBench, DISABLED_OffloadedQuestDecode) {
  const char* model = std::getenv("NANOVLLM_STEP_TIMELINE_MODEL");
  if (model == nullptr) GTEST_SKIP() << "set NANOVLLM_STEP_TIMELINE_MODEL";
  if (!cuda_test::KernelTimeline::available()) GTEST_SKIP() << "CUPTI not loadable (set NANOVLLM_CUPTI_LIB)";
  const char* ctx_env = std::getenv("NANOVLLM_STEP_TIMELINE_CONTEXT");
  const char* seqs_env = std::getenv("NANOVLLM_STEP_TIMELINE_SEQS");
  const int64_t context = ctx_env ? std::atoll(ctx_env) : 131000;
  const int64_t seqs = seqs_env ? std::atoll(seqs_env) : 1;
  EngineConfig ec;
  ec.model.path = model;
  ec.model.backend = Backend::kCuda;
  ec.model.max_model_len = context + 64;
  ec.cache.block_size = 16;
  ec.cache.num_kv_blocks = 64;
  ec.cache.enable_prefix_caching = false;
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.offload.max_num_seqs = seqs;
  ec.sparse.policy = "quest";
  ec.sparse.budget_tokens = 2048;
  if (const char* dt = std::getenv("NANOVLLM_STEP_TIMELINE_KV_DTYPE")) ec.cache.kv_cache_dtype = dt;
  if (const char* fast = std::getenv("NANOVLLM_STEP_TIMELINE_FAST_PREFILL"); fast != nullptr && fast[0] == '1') {
    ec.sparse_prefill.policy = SparsePrefillPolicy::kAvgPool;
    ec.sparse_prefill.budget_tokens = 4096;
    ec.sparse_prefill.dense_layers = 1;
  }
  LLMEngine engine(ec);
  std::mt19937 rng(1);
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 40;
  for (int64_t r = 0; r < seqs; ++r) {
    std::vector<int32_t> prompt(static_cast<size_t>(context));
    for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % 100000);
    engine.add_request(prompt, sp);
  }
  for (int i = 0; i < seqs + 10; ++i) engine.step();  // the prefills + warm decode steps
  cuda_test::KernelTimeline tl;
  tl.start();
  for (int i = 0; i < 6; ++i) engine.step();
  std::vector<cuda_test::KernelRecord> recs = tl.stop();
  while (engine.has_unfinished()) engine.step();
  std::erase_if(recs, [](const cuda_test::KernelRecord& r) { return r.device != 0; });
  report_steps(recs);
}

}  // namespace
}  // namespace nanovllm
