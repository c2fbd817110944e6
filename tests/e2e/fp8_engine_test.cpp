// The CPU engine on block-scaled FP8 checkpoints (docs/fp8.md): an FP8 checkpoint runs as the F32 checkpoint of
// its dequantized weights — written by the test's own reading of the file (support/fp8_reference.h), not the
// loader — with the same tokens and logprobs (the same f32 weights either way: equal up to 1e-6); a bf16
// checkpoint under --quantization fp8 runs as the FP8 checkpoint of the same seed (make-test-model quantizes the
// same bf16 values); tensor parallel over 2 ranks gives the same tokens (logprobs within 1e-4: a different
// summation order). Quantizing visibly changes the model (it is not a no-op).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "nanovllm/llm/llm.h"
#include "nanovllm/model/test_model.h"
#include "support/fp8_reference.h"
#include "support/process_scratch_dir.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<TokenLogprob>>> logprobs;  // [request][step][top-5]
};

Outcome run(const std::filesystem::path& model, const std::string& quantization = "auto", int64_t tp = 1) {
  EngineConfig ec;
  ec.model.path = model;
  ec.model.backend = Backend::kCpu;
  ec.model.quantization = quantization;
  ec.parallel.tensor_parallel_size = tp;
  ec.scheduler.max_num_batched_tokens = 64;  // the longer prompts prefill in chunks
  LLM llm(ec);
  Outcome r;
  for (const RequestOutput& o : llm.generate(testing::random_prompts({1, 9, 40, 77}, 512, 5), testing::greedy(12, 5))) {
    r.tokens.push_back(o.token_ids);
    r.logprobs.push_back(o.logprobs);
  }
  return r;
}

// The largest |logprob difference| of the top-5 by rank; tokens must agree.
double max_logprob_diff(const Outcome& a, const Outcome& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  double worst = 0;
  for (size_t r = 0; r < a.logprobs.size() && r < b.logprobs.size(); ++r)
    for (size_t s = 0; s < a.logprobs[r].size() && s < b.logprobs[r].size(); ++s)
      for (size_t k = 0; k < a.logprobs[r][s].size() && k < b.logprobs[r][s].size(); ++k)
        worst = std::max(worst, std::fabs(static_cast<double>(a.logprobs[r][s][k].logprob - b.logprobs[r][s][k].logprob)));
  return worst;
}

// A Qwen3 with full and partial 128 x 128 blocks (H 192, I 320, q 192 / kv 96 rows), heads of 48.
nlohmann::json config(bool fp8) {
  nlohmann::json j = test_model_config("tiny");
  j["hidden_size"] = 192;
  j["intermediate_size"] = 320;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 48;
  j["tie_word_embeddings"] = false;
  if (fp8) j["quantization_config"] = fp8_quantization_config();
  return j;
}

class Fp8Engine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = std::make_unique<testing::ProcessScratchDir>("nanovllm-fp8-engine");
    root_ = scratch_->path();
    write_test_model(root_ / "fp8", config(true), 21);
    write_test_model(root_ / "bf16", config(false), 21);
    testing::write_dequantized_checkpoint(root_ / "fp8", root_ / "dequantized");
  }
  static void TearDownTestSuite() { scratch_.reset(); }
  static std::unique_ptr<testing::ProcessScratchDir> scratch_;
  static std::filesystem::path root_;
};
std::unique_ptr<testing::ProcessScratchDir> Fp8Engine::scratch_;
std::filesystem::path Fp8Engine::root_;

TEST_F(Fp8Engine, Fp8CheckpointRunsAsItsIndependentlyDequantizedWeights) {
  const Outcome fp8 = run(root_ / "fp8");
  const double diff = max_logprob_diff(fp8, run(root_ / "dequantized"));
  std::printf("fp8 checkpoint vs its dequantized f32 checkpoint: max |logprob diff| %.3g\n", diff);
  EXPECT_LE(diff, 1e-6);
  EXPECT_LE(max_logprob_diff(run(root_ / "fp8", "none"), fp8), 1e-6);  // the CPU always dequantizes
}

TEST_F(Fp8Engine, QuantizationFp8OnTheBf16CheckpointRunsAsTheFp8Checkpoint) {
  const Outcome fp8 = run(root_ / "fp8");
  EXPECT_LE(max_logprob_diff(run(root_ / "bf16", "fp8"), fp8), 1e-6);
  // The bf16 model itself differs: quantization is not a no-op (e4m3 keeps 4 significant bits).
  const Outcome bf16 = run(root_ / "bf16");
  double moved = 0;
  for (size_t r = 0; r < bf16.logprobs.size(); ++r)
    for (size_t s = 0; s < std::min(bf16.logprobs[r].size(), fp8.logprobs[r].size()); ++s)
      moved = std::max(moved, std::fabs(static_cast<double>(bf16.logprobs[r][s][0].logprob - fp8.logprobs[r][s][0].logprob)));
  std::printf("bf16 vs fp8 top logprob: max diff %.3g\n", moved);
  EXPECT_GT(moved, 1e-3);
}

TEST_F(Fp8Engine, MoeExpertsInFp8RunAsTheirDequantizedWeights) {
  nlohmann::json moe = test_model_config("qwen3-moe-tiny");
  moe["quantization_config"] = fp8_quantization_config();  // every expert's gate / up / down too; the router bf16
  write_test_model(root_ / "moe_fp8", moe, 22);
  testing::write_dequantized_checkpoint(root_ / "moe_fp8", root_ / "moe_dequantized");
  const double diff = max_logprob_diff(run(root_ / "moe_fp8"), run(root_ / "moe_dequantized"));
  std::printf("MoE fp8 checkpoint vs its dequantized f32 checkpoint: max |logprob diff| %.3g\n", diff);
  EXPECT_LE(diff, 1e-6);
}

TEST_F(Fp8Engine, TensorParallelRanksRunTheFp8CheckpointAlike) {
  const double diff = max_logprob_diff(run(root_ / "fp8", "auto", 2), run(root_ / "fp8"));
  std::printf("fp8 checkpoint, 2 ranks vs 1: max |logprob diff| %.3g\n", diff);
  EXPECT_LE(diff, 1e-4);
}

}  // namespace
}  // namespace nanovllm
