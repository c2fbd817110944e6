// Bad requests get a clear nanovllm::Error and leave the engine able to serve the next request.
#include <gtest/gtest.h>

#include "nanovllm/llm/llm.h"
#include "support/expect_error.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ec_.model.path = testing::tiny_model_dir("bad-input", nlohmann::json::object(), 9);
    ec_.model.backend = Backend::kCpu;
    ec_.model.max_model_len = 64;
  }
  EngineConfig ec_;
};


TEST_F(BadInput, RejectedRequestsLeaveTheEngineServing) {
  LLM llm(ec_);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_tokens = 4;
  sp.ignore_eos = true;
  testing::expect_error([&] { llm.generate({{}}, sp); }, {"empty"});
  testing::expect_error([&] { llm.generate({std::vector<int32_t>(64, 3)}, sp); }, {"max_model_len"});
  testing::expect_error([&] { llm.generate({{1, 2, 100000}}, sp); }, {"vocabulary"});
  testing::expect_error([&] { llm.generate({{1, -5}}, sp); }, {"vocabulary"});
  SamplingParams bad = sp;
  bad.top_p = 0;
  testing::expect_error([&] { llm.generate({{1, 2}}, bad); }, {"top_p"});
  // A batch with one bad prompt is rejected whole, then a good batch runs normally.
  testing::expect_error([&] { llm.generate({{1, 2, 3}, {}}, sp); }, {"empty"});
  EXPECT_FALSE(llm.engine().has_unfinished());
  const auto out = llm.generate({{1, 2, 3}, {4, 5}}, sp);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].token_ids.size(), 4u);
  EXPECT_EQ(out[1].token_ids.size(), 4u);
}

TEST_F(BadInput, BadEngineConfigIsAnError) {
  auto ec = ec_;
  ec.model.max_model_len = 1 << 30;
  testing::expect_error([&] { LLM llm(ec); }, {"max_model_len"});
  ec = ec_;
  ec.model.path = "/nonexistent/model/dir";
  testing::expect_error([&] { LLM llm(ec); }, {"does not exist"});
  // Tensor parallel: the model's limits (the tiny model has 4 heads; more in tensor_parallel_test.cpp).
  ec = ec_;
  ec.parallel.tensor_parallel_size = 3;
  testing::expect_error([&] { LLM llm(ec); }, {"tensor_parallel_size 3 does not divide num_attention_heads 4"});
}

}  // namespace
}  // namespace nanovllm
