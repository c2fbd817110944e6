// Qwen3MoeForCausalLM on the CPU backend against HF transformers (float32, eager): greedy tokens identical, the
// top logprobs of every step within 1e-3, whole prompts in one step and in chunks of 16 tokens. Unlike the dense
// goldens (make-test-model checkpoints), these checkpoints were written by transformers itself in the hub layout
// (scripts/hf_moe_golden.py, on the GPU machine) and are committed next to their golden files:
// tests/data/golden/<name>/ and tests/data/golden/<name>.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "e2e/golden_check.h"
#include "nanovllm/model/config.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

class HfMoeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfMoeGolden, GreedyTokensAndLogprobsMatchTransformers) {
  const std::filesystem::path dir = testing::test_data_dir() / "golden";
  const std::filesystem::path model = dir / GetParam(), file = dir / (GetParam() + ".json");
  ASSERT_TRUE(std::filesystem::is_regular_file(model / "model.safetensors") && std::filesystem::is_regular_file(file))
      << "missing " << model.string() << "/model.safetensors or " << file.string()
      << " — run `python3 scripts/hf_moe_golden.py --out tests/data/golden` where transformers is installed";
  const ModelConfig cfg = ModelConfig::from_model_dir(model);
  ASSERT_EQ(cfg.arch, Architecture::kQwen3Moe);
  std::ifstream in(file);
  const nlohmann::json golden = nlohmann::json::parse(in);
  testing::expect_matches_golden(golden, model, 512, GetParam() + " (whole prompts)");
  testing::expect_matches_golden(golden, model, 16, GetParam() + " (chunks of 16 tokens)");
}

INSTANTIATE_TEST_SUITE_P(Models, HfMoeGolden, ::testing::Values("qwen3_moe_norm_topk", "qwen3_moe_sparse_step"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nanovllm
