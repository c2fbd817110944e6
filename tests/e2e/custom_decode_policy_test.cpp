// A decode policy written outside src/ (sparse/decode_policy.h's recipe): a toy "recent pages" policy in this
// file alone, handed to the engine through SparseConfig::make_custom, runs on every path a registered policy runs
// on — the GPU-resident paged cache and the offloaded lanes (CPU backend: the same code as CUDA's, on CPU
// tensors). A budget covering the context gives the dense tokens; a small one attends only the sink and the most
// recent pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "nanovllm/llm/llm.h"
#include "nanovllm/sparse/decode_policy.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

// StreamingLLM over pages: every page scores its index, so the best pages are the latest; the base class keeps the
// sink and the recent window and attends the selection. No page metadata.
class RecentPagesPolicy final : public SparseDecodePolicy {
 public:
  RecentPagesPolicy(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc)
      : SparseDecodePolicy(shape, budget_pages, 1, 1, alloc) {}
  void update_pages(int64_t, const KvCacheTensor&, TensorView, ops::Stream) override {}

 private:
  void score_pages(TensorView scores, int64_t, TensorView, const AttentionMetadata&, ops::Stream) override {
    float* s = scores.data_as<float>();  // CPU backend: host memory
    const int64_t rows = scores.dim(0) * scores.dim(1), pages = scores.dim(2);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t p = 0; p < pages; ++p) s[r * pages + p] = static_cast<float>(p);
  }
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  SparseDecodeCounters resident, offloaded;
};

class CustomDecodePolicy : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::tiny_model_dir("custom-policy", {{"num_hidden_layers", 2}}, 37);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;
    base_.model.max_model_len = 320;
    base_.scheduler.max_num_batched_tokens = 512;
  }
  // The toy policy with a budget of `budget` tokens; `made` counts the policies the engine built.
  EngineConfig toy(int64_t budget, bool offload) {
    EngineConfig ec = base_;
    ec.sparse.policy = "recent-pages";
    ec.sparse.budget_tokens = budget;
    ec.sparse.make_custom = [this](const PagedKvShape& shape, int64_t pages, Allocator& alloc) {
      ++made_;
      return std::make_unique<RecentPagesPolicy>(shape, pages, alloc);
    };
    if (offload) {
      ec.offload.enabled = true;
      ec.offload.min_tokens = 1;
      ec.offload.block_size = 32;
      ec.offload.max_num_seqs = 2;
    }
    return ec;
  }
  static Outcome run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts) {
    LLM llm(ec);
    Outcome r;
    for (const RequestOutput& o : llm.generate(prompts, testing::greedy(16, 3))) r.tokens.push_back(o.token_ids);
    const RunnerStats stats = llm.engine().runner_stats();
    if (stats.sparse_decode) r.resident = *stats.sparse_decode;
    if (stats.offload && stats.offload->sparse_decode) r.offloaded = *stats.offload->sparse_decode;
    return r;
  }
  EngineConfig base_;
  int made_ = 0;
};

TEST_F(CustomDecodePolicy, CoveringBudgetGivesTheDenseTokensOnBothPaths) {
  const auto prompts = testing::random_prompts({9, 100, 203}, 512, 5);
  const Outcome dense = run(base_, prompts);
  const Outcome resident = run(toy(320, false), prompts);
  EXPECT_EQ(resident.tokens, dense.tokens);
  EXPECT_GT(resident.resident.sparse_layer_steps, 0);
  EXPECT_EQ(resident.resident.attended_keys, resident.resident.context_keys);
  const Outcome offloaded = run(toy(320, true), prompts);
  EXPECT_EQ(offloaded.tokens, dense.tokens);
  EXPECT_GT(offloaded.offloaded.sparse_layer_steps, 0);
  EXPECT_EQ(made_, 3);  // resident; offloaded: the engine's paged cache and the offload lanes' layer buffer
}

TEST_F(CustomDecodePolicy, SmallBudgetAttendsTheSinkAndTheRecentPages) {
  const auto prompts = testing::random_prompts({200, 240}, 512, 6);
  const Outcome resident = run(toy(48, false), prompts);  // 6 pages of 8: the sink and the 5 latest
  const Outcome offloaded = run(toy(48, true), prompts);
  EXPECT_EQ(offloaded.tokens, resident.tokens);  // the same pages, moved over the offload path
  // Every sparse step reads the sink page and the latest 5 pages: at most 48 keys of a context of 200 or more,
  // per sequence, KV head and layer.
  ASSERT_GT(resident.resident.sparse_layer_steps, 0);
  EXPECT_GT(resident.resident.attended_keys, 0);
  EXPECT_LE(resident.resident.attended_keys * 4, resident.resident.context_keys);
}

}  // namespace
}  // namespace nanovllm
