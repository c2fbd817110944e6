// The CPU backend against HF transformers (float32, eager): greedy tokens identical, the top logprobs
// of every step within 1e-3. Golden files come from scripts/hf_golden.py on the GPU machine.
#include <gtest/gtest.h>

#include <cmath>

#include "nanovllm/llm/llm.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

constexpr double kLogprobTolerance = 1e-3;

class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, GreedyTokensAndLogprobsMatchTransformers) {
  const nlohmann::json golden = testing::load_golden(GetParam());
  ASSERT_FALSE(golden.is_null()) << "missing golden file for " << GetParam()
                                 << " — run scripts/hf_golden.py on the GPU machine";
  EngineConfig ec;
  ec.model.path = testing::golden_model_dir(GetParam());
  ec.model.backend = Backend::kCpu;
  ec.scheduler.max_num_batched_tokens = 512;
  LLM llm(ec);

  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : golden["prompts"]) prompts.push_back(p["prompt_ids"].get<std::vector<int32_t>>());
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = static_cast<int64_t>(golden["prompts"][0]["greedy_ids"].size());
  sp.logprobs = static_cast<int64_t>(golden["prompts"][0]["top_logprobs"][0].size());
  const auto outputs = llm.generate(prompts, sp);  // all prompts in one batch

  double max_diff = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& g = golden["prompts"][i];
    const auto want = g["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(outputs[i].token_ids, want) << "prompt " << i << " (" << prompts[i].size() << " tokens)";
    ASSERT_EQ(outputs[i].logprobs.size(), want.size());
    for (size_t step = 0; step < want.size(); ++step) {
      const auto& top = g["top_logprobs"][step];
      const auto& ours = outputs[i].logprobs[step];
      ASSERT_EQ(ours.size(), top.size());
      for (size_t k = 0; k < top.size(); ++k) {
        // Ids can swap where HF's two logprobs are within the tolerance; compare values by rank and
        // ids only where the gap to the neighbour is clear.
        const double want_lp = top[k]["logprob"].get<double>();
        const double diff = std::fabs(ours[k].logprob - want_lp);
        max_diff = std::max(max_diff, diff);
        EXPECT_LE(diff, kLogprobTolerance) << "prompt " << i << " step " << step << " rank " << k;
        const bool clear_gap = (k == 0 || top[k - 1]["logprob"].get<double>() - want_lp > 2 * kLogprobTolerance) &&
                               (k + 1 == top.size() || want_lp - top[k + 1]["logprob"].get<double>() > 2 * kLogprobTolerance);
        if (clear_gap) {
          EXPECT_EQ(ours[k].id, top[k]["id"].get<int64_t>()) << "prompt " << i << " step " << step;
        }
      }
    }
  }
  std::printf("%s: max |logprob - HF| = %.3g\n", GetParam().c_str(), max_diff);
}

INSTANTIATE_TEST_SUITE_P(Models, HfGolden, ::testing::ValuesIn(testing::golden_model_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nanovllm
