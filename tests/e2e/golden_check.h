// The comparison of the CPU backend with an HF transformers golden file (float32, eager): the greedy tokens
// identical, the top logprobs of every step within 1e-3 (ids compared where HF's neighbours are further apart
// than twice that, since near-ties may swap). Shared by the dense goldens (hf_golden_test.cpp) and the MoE
// ones (hf_moe_golden_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/llm/llm.h"

namespace nanovllm::testing {

inline constexpr double kGoldenLogprobTolerance = 1e-3;

// Runs every prompt of `golden` in one batch on the model in `model_dir` (CPU backend) with a step budget of
// max_batched_tokens (smaller than a prompt: chunked prefill) and checks the outputs against the file.
inline void expect_matches_golden(const nlohmann::json& golden, const std::filesystem::path& model_dir,
                                  int64_t max_batched_tokens, const std::string& what) {
  EngineConfig ec;
  ec.model.path = model_dir;
  ec.model.backend = Backend::kCpu;
  ec.scheduler.max_num_batched_tokens = max_batched_tokens;
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
        EXPECT_LE(diff, kGoldenLogprobTolerance) << "prompt " << i << " step " << step << " rank " << k;
        const bool clear_gap =
            (k == 0 || top[k - 1]["logprob"].get<double>() - want_lp > 2 * kGoldenLogprobTolerance) &&
            (k + 1 == top.size() || want_lp - top[k + 1]["logprob"].get<double>() > 2 * kGoldenLogprobTolerance);
        if (clear_gap) {
          EXPECT_EQ(ours[k].id, top[k]["id"].get<int64_t>()) << "prompt " << i << " step " << step;
        }
      }
    }
  }
  std::printf("%s: max |logprob - HF| = %.3g\n", what.c_str(), max_diff);
}

}  // namespace nanovllm::testing
