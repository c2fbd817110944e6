#include "nanovllm/engine/sampling_params.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "nanovllm/core/error.h"
#include "nanovllm/engine/sequence.h"

using namespace nanovllm;

namespace {

// Expects validate() to throw an Error whose message names `field`.
void expect_rejects(const std::function<void(SamplingParams&)>& edit, const std::string& field) {
  SamplingParams p;
  edit(p);
  try {
    p.validate(1000);
    ADD_FAILURE() << "no error for " << field;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(SamplingParams, DefaultsAndBoundaryValuesAreValid) {
  SamplingParams p;
  EXPECT_NO_THROW(p.validate(1000));
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_tokens = 1;
  p.min_tokens = 1;
  p.stop_token_ids = {0, 999};
  p.logprobs = 20;
  EXPECT_NO_THROW(p.validate(1000));
  p.top_k = 5;
  EXPECT_NO_THROW(p.validate(1000));
}

TEST(SamplingParams, EachViolationNamesItsField) {
  expect_rejects([](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  expect_rejects([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  expect_rejects([](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  expect_rejects([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  expect_rejects([](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  expect_rejects([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  expect_rejects([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  expect_rejects([](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  expect_rejects([](SamplingParams& p) { p.frequency_penalty = -2.01f; }, "frequency_penalty");
  expect_rejects([](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens");
  expect_rejects([](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens");
  expect_rejects([](SamplingParams& p) { p.min_tokens = p.max_tokens + 1; }, "min_tokens");
  expect_rejects([](SamplingParams& p) { p.stop_token_ids = {5, 1000}; }, "stop_token_ids");
  expect_rejects([](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids");
  expect_rejects([](SamplingParams& p) { p.logprobs = 21; }, "logprobs");
  expect_rejects([](SamplingParams& p) { p.logprobs = -1; }, "logprobs");
}

TEST(FinishReason, ToString) {
  EXPECT_STREQ(to_string(FinishReason::kStop), "stop");
  EXPECT_STREQ(to_string(FinishReason::kLength), "length");
  EXPECT_STREQ(to_string(FinishReason::kAbort), "abort");
  EXPECT_STREQ(to_string(FinishReason::kNone), "");
}
