// Block-scaled FP8 checkpoints on the CPU backend against HF transformers (float32, eager) on the dequantized
// weights: greedy tokens identical, the top logprobs of every step within 1e-3, whole prompts and chunks of 16
// tokens. The checkpoints (F8_E4M3 codes and block scales made by torch, not by the engine: BF16 scales on whole
// blocks; F32 scales on partial blocks with a tied head and modules_to_not_convert) and their goldens come from
// scripts/hf_fp8_golden.py on the GPU machine: tests/data/golden/<name>/ and tests/data/golden/<name>.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "e2e/golden_check.h"
#include "nanovllm/model/config.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

class HfFp8Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFp8Golden, GreedyTokensAndLogprobsMatchTransformersOnTheDequantizedWeights) {
  const std::filesystem::path dir = testing::test_data_dir() / "golden";
  const std::filesystem::path model = dir / GetParam(), file = dir / (GetParam() + ".json");
  if (!std::filesystem::is_regular_file(model / "model.safetensors") || !std::filesystem::is_regular_file(file))
    GTEST_SKIP() << "no FP8 golden: " << model.string() << "/model.safetensors or " << file.string()
                 << " is missing — run `python3 scripts/hf_fp8_golden.py --out tests/data/golden` where torch and "
                    "transformers are installed (scripts/bench/fp8_device.sh does)";
  const ModelConfig cfg = ModelConfig::from_model_dir(model);
  ASSERT_TRUE(cfg.quantization.fp8()) << model.string() << " has no fp8 quantization_config";
  std::ifstream in(file);
  const nlohmann::json golden = nlohmann::json::parse(in);
  testing::expect_matches_golden(golden, model, 512, GetParam() + " (whole prompts)");
  testing::expect_matches_golden(golden, model, 16, GetParam() + " (chunks of 16 tokens)");
}

INSTANTIATE_TEST_SUITE_P(Models, HfFp8Golden, ::testing::Values("qwen3_fp8_bf16_scales", "qwen3_fp8_partial_blocks"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nanovllm
