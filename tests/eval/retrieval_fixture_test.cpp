// The trained retrieval fixture (tests/data/retrieval-model, scripts/train_retrieval_model.py) on the CPU
// backend through `nanovllm eval`: a real check of attention over 2K tokens, not a smoke test. A 4-layer model that
// retrieves needles only scores high when every position's keys and values reach the query intact. How the
// checkpoint was trained, and its accuracy in HF transformers: tests/data/retrieval-model/README.md (HF at 2K: 100 /
// 100 / 93.8 / 96.9 on these tasks). Every path (offload, lanes, TP) and sparse policy against dense on this fixture:
// quality_matrix_test.cpp (it replaces the dense-vs-offload run that was here).
//
// CPU time (reference kernels, one thread): ~65 s for the accuracy run, ~5 s for the first-token KL runs.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "eval_test_util.h"
#include "support/process_scratch_dir.h"

namespace nanovllm::eval {
namespace {

using testing::long_retrieval_model_dir;
using testing::retrieval_model_dir;
using testing::run_cli;

// Four niah tasks × 8 samples at 2K: ~65K prompt tokens, about a minute on the CPU reference backend (16 samples were
// 2.5 minutes of CI; the quality matrix runs every path and policy on this fixture besides).
// Noise, corpus and distractor-needle haystacks, one needle and four.
constexpr const char* kTasks = "niah_single_1,niah_single_2,niah_multikey_2,niah_multivalue";
constexpr double kMinMeanScore = 90.0;  // RULER score (percent) over the tasks
constexpr double kMinTaskScore = 80.0;

class RetrievalFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(retrieval_model_dir() / "model.safetensors"))
        << "the trained fixture is missing: " << (retrieval_model_dir() / "model.safetensors").string();
  }
  nlohmann::json run(const std::string& args, const std::string& name,
                     const std::filesystem::path& model = retrieval_model_dir()) {
    static const nanovllm::testing::ProcessScratchDir dir("nanovllm-eval-fixture");
    const auto out = dir.path() / (name + ".json");
    const auto r = run_cli("eval ruler --backend cpu --model " + model.string() + " " + args + " --json-out " +
                           out.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::cout << r.output;  // the score table, for the log
    std::ifstream f(out);
    return nlohmann::json::parse(f);
  }
};

TEST_F(RetrievalFixture, RetrievesNeedlesAt2K) {
  const auto j = run(std::string("--tasks ") + kTasks + " --context 2048 --samples 8", "accuracy");
  ASSERT_EQ(j["samples"].size(), 4u * 8u);
  double sum = 0;
  for (const auto& [task, by_context] : j["scores"].items()) {
    const double score = by_context["2048"].get<double>();
    EXPECT_GE(score, kMinTaskScore) << task;
    sum += score;
  }
  EXPECT_GE(sum / static_cast<double>(j["scores"].size()), kMinMeanScore);
}

// The 128K fixture (tests/data/retrieval-model-128k/README.md: its GPU record at 16K-128K) is the same weights
// with YaRN: it must load (the weights link resolves, the 128K limit holds) and still retrieve at 2K.
TEST_F(RetrievalFixture, LongFixtureLoadsAndRetrieves) {
  ASSERT_TRUE(std::filesystem::exists(long_retrieval_model_dir() / "model.safetensors"))
      << "the weights link of " << long_retrieval_model_dir().string() << " does not resolve";
  const auto j = run("--tasks niah_single_1,niah_single_2 --context 2048 --samples 4", "long-fixture",
                     long_retrieval_model_dir());
  EXPECT_EQ(j["max_model_len"], 131072);
  ASSERT_EQ(j["samples"].size(), 2u * 4u);
  for (const auto& [task, by_context] : j["scores"].items()) EXPECT_GE(by_context["2048"].get<double>(), 75.0) << task;
}

// First-token KL against a reference run (--first-token-logprobs, --kl-reference): the same configuration
// twice gives identical distributions (KL 0, every argmax the same); sparse prefill, which skips key blocks
// of the prompt, moves them (KL > 0). One sequence at a time: a step that batches two prefills stays dense.
TEST_F(RetrievalFixture, FirstTokenKlAgainstAReferenceRun) {
  const std::string args =
      "--tasks niah_single_2,niah_multikey_1 --context 1024 --samples 2 --max-new-tokens 1 --max-num-seqs 1 "
      "--first-token-logprobs 20";
  static const nanovllm::testing::ProcessScratchDir dir("nanovllm-eval-kl");
  const std::string ref_path = (dir.path() / "reference.json").string();
  const auto ref = run(args, "kl-reference");
  ASSERT_EQ(ref["samples"].size(), 4u);
  for (const auto& s : ref["samples"]) {
    ASSERT_EQ(s["first_token"]["ids"].size(), 20u);
    EXPECT_EQ(s["first_token"]["ids"][0], s["output_ids"][0]);  // greedy: the first token is the argmax
  }
  std::ofstream(ref_path) << ref.dump();

  const auto same = run(args + " --kl-reference " + ref_path, "kl-same");
  const auto& kl = same["first_token_kl"];
  EXPECT_EQ(kl["overall"]["samples"], 4);
  EXPECT_LT(kl["overall"]["max"].get<double>(), 1e-9);
  EXPECT_EQ(kl["overall"]["top1_agreement"], 1.0);
  EXPECT_EQ(kl["contexts"]["1024"]["samples"], 4);

  const auto sparse = run(args + " --kl-reference " + ref_path +
                              " --sparse-prefill-policy avgpool --sparse-prefill-threshold 0.3"
                              " --sparse-prefill-min-tokens 256",
                          "kl-sparse");
  ASSERT_LT(sparse["sparse_prefill_density"].get<double>(), 0.9);  // it did go sparse
  const auto& skl = sparse["first_token_kl"];
  EXPECT_EQ(skl["overall"]["samples"], 4);
  EXPECT_GT(skl["overall"]["mean"].get<double>(), 1e-9);
  EXPECT_GE(skl["overall"]["max"].get<double>(), skl["overall"]["mean"].get<double>());
}

}  // namespace
}  // namespace nanovllm::eval
