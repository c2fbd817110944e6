// The CPU backend against HF transformers (float32, eager): greedy tokens identical, the top logprobs
// of every step within 1e-3. Golden files come from scripts/hf_golden.py on the GPU machine.
#include <gtest/gtest.h>

#include "e2e/golden_check.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

class HfGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGolden, GreedyTokensAndLogprobsMatchTransformers) {
  const nlohmann::json golden = testing::load_golden(GetParam());
  ASSERT_FALSE(golden.is_null()) << "missing golden file for " << GetParam()
                                 << " — run scripts/hf_golden.py on the GPU machine";
  testing::expect_matches_golden(golden, testing::golden_model_dir(GetParam()), 512, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, HfGolden, ::testing::ValuesIn(testing::golden_model_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nanovllm
