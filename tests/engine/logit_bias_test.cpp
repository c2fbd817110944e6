// SamplingParams::logit_bias (OpenAI semantics, vLLM's order) in the CPU Sampler: the bias is added to the
// raw logit after min_tokens suppression and before the penalties and the temperature; logprobs stay
// those of the raw logits. Plus its validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/core/rng.h"
#include "nanovllm/engine/sampler.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

using test::make_seq;

std::vector<float> random_logits(std::mt19937& rng, int64_t v, float lo = -3.0f, float hi = 3.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> x(static_cast<size_t>(v));
  for (auto& e : x) e = d(rng);
  return x;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

int64_t argmax(const std::vector<float>& x) { return std::max_element(x.begin(), x.end()) - x.begin(); }

TEST(LogitBias, LargeBiasPicksTheTokenUnderGreedy) {
  std::mt19937 rng(1);
  const int64_t v = 1000;
  for (int row = 0; row < 20; ++row) {
    const auto x = random_logits(rng, v, -20.0f, 20.0f);  // LLM-like range
    const auto target = static_cast<int32_t>(rng() % v);
    SamplingParams p = greedy();
    p.logit_bias = {{target, 100.0f}};
    EXPECT_EQ(Sampler().sample_row(x.data(), v, *make_seq(1, {3}, p)).token_id, target);
  }
  // Smaller biases move the choice only as far as the arithmetic says: x[1] + 0.6 beats x[0] by 0.1.
  const std::vector<float> x{1.0f, 0.5f, -1.0f};
  SamplingParams p = greedy();
  p.logit_bias = {{1, 0.6f}};
  EXPECT_EQ(Sampler().sample_row(x.data(), 3, *make_seq(1, {2}, p)).token_id, 1);
  p.logit_bias = {{1, 0.4f}};
  EXPECT_EQ(Sampler().sample_row(x.data(), 3, *make_seq(1, {2}, p)).token_id, 0);
}

TEST(LogitBias, MinusHundredBans) {
  std::mt19937 rng(2);
  const int64_t v = 64;
  auto x = random_logits(rng, v, -10.0f, 10.0f);
  const auto top = static_cast<int32_t>(argmax(x));
  SamplingParams p = greedy();
  p.logit_bias = {{top, -100.0f}};
  EXPECT_NE(Sampler().sample_row(x.data(), v, *make_seq(1, {0}, p)).token_id, top);
  // Sampled at T = 1: the best token (and another banned one) never come up in thousands of draws,
  // while without the bias the best one is drawn often.
  SamplingParams s;
  s.temperature = 1.0f;
  s.logit_bias = {{top, -100.0f}, {(top + 1) % static_cast<int32_t>(v), -100.0f}};
  auto banned = make_seq(2, {0}, s);
  SamplingParams plain;
  plain.temperature = 1.0f;
  auto unbiased = make_seq(3, {0}, plain);
  int top_without_bias = 0;
  for (int i = 0; i < 3000; ++i) {
    banned->rng_state = unbiased->rng_state = rng_key_from_seed(static_cast<uint64_t>(i));
    const int32_t id = Sampler().sample_row(x.data(), v, *banned).token_id;
    ASSERT_NE(id, top);
    ASSERT_NE(id, (top + 1) % v);
    top_without_bias += Sampler().sample_row(x.data(), v, *unbiased).token_id == top;
  }
  EXPECT_GT(top_without_bias, 100);
}

TEST(LogitBias, EmptyOrZeroBiasEqualsThePlainPath) {
  std::mt19937 rng(3);
  const int64_t v = 257;
  for (int row = 0; row < 200; ++row) {
    const auto x = random_logits(rng, v);
    SamplingParams p;
    p.temperature = row % 3 == 0 ? 0.0f : 0.8f;
    p.top_p = 0.9f;
    p.logprobs = 3;
    SamplingParams zero = p;
    zero.logit_bias = {{static_cast<int32_t>(row % v), 0.0f}, {7, 0.0f}};
    auto a = make_seq(1, {5, 6}, p);
    auto b = make_seq(1, {5, 6}, zero);
    a->rng_state = b->rng_state = rng_key_from_seed(static_cast<uint64_t>(row));
    const SampledToken ta = Sampler().sample_row(x.data(), v, *a);
    const SampledToken tb = Sampler().sample_row(x.data(), v, *b);
    EXPECT_EQ(ta.token_id, tb.token_id);
    ASSERT_EQ(ta.top_logprobs.size(), tb.top_logprobs.size());
    for (size_t k = 0; k < ta.top_logprobs.size(); ++k) {
      EXPECT_EQ(ta.top_logprobs[k].id, tb.top_logprobs[k].id);
      EXPECT_EQ(ta.top_logprobs[k].logprob, tb.top_logprobs[k].logprob);
    }
  }
}

TEST(LogitBias, SamplingFollowsTheBiasedSoftmax) {
  // Draws follow softmax((x + bias) / T): the bias moves probability exactly like a logit change.
  const std::vector<float> x{0.0f, 0.5f, -0.5f, 1.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  p.logit_bias = {{0, 1.0f}, {3, -0.5f}};
  std::vector<double> want(4);
  double total = 0;
  const float biased[] = {1.0f, 0.5f, -0.5f, 0.5f};
  for (int i = 0; i < 4; ++i) total += want[i] = std::exp(biased[i] / 0.5);
  auto seq = make_seq(1, {2}, p);
  std::vector<double> freq(4, 0.0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    seq->rng_state = rng_key_from_seed(static_cast<uint64_t>(i));
    freq[Sampler().sample_row(x.data(), 4, *seq).token_id] += 1.0 / draws;
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(freq[i], want[i] / total, 0.015) << "token " << i;
}

TEST(LogitBias, AppliesBeforePenaltiesAndAfterSuppression) {
  // Token 0 is seen (repetition penalty 2) with raw logit -1 and bias +4. Bias first: (-1 + 4) / 2 = 1.5,
  // below token 1's 1.75. Penalty first would give -1 * 2 + 4 = 2 and pick token 0.
  const std::vector<float> x{-1.0f, 1.75f, 0.0f};
  SamplingParams p = greedy();
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{0, 4.0f}};
  EXPECT_EQ(Sampler().sample_row(x.data(), 3, *make_seq(1, {0}, p)).token_id, 1);
  // A suppressed EOS stays suppressed whatever its bias.
  SamplingParams q = greedy();
  q.min_tokens = 3;
  q.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(Sampler({2}).sample_row(x.data(), 3, *make_seq(2, {0}, q)).token_id, 1);
  // Logprobs are those of the raw logits, bias or not.
  q.min_tokens = 0;
  q.logprobs = 3;
  const SampledToken t = Sampler({2}).sample_row(x.data(), 3, *make_seq(3, {0}, q));
  EXPECT_EQ(t.token_id, 2);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].id, 1);  // raw 1.75 is still the best logprob
}

TEST(LogitBias, Validation) {
  using testing::expect_error;
  SamplingParams p;
  p.logit_bias = {{0, -100.0f}, {999, 100.0f}};
  EXPECT_NO_THROW(p.validate(1000));
  p.logit_bias = {{1000, 1.0f}};
  expect_error([&] { p.validate(1000); }, {"logit_bias", "1000", "vocabulary"});
  p.logit_bias = {{-1, 1.0f}};
  expect_error([&] { p.validate(1000); }, {"logit_bias", "-1"});
  p.logit_bias = {{5, 100.5f}};
  expect_error([&] { p.validate(1000); }, {"logit_bias", "[-100, 100]"});
  p.logit_bias = {{5, std::nanf("")}};
  expect_error([&] { p.validate(1000); }, {"logit_bias", "[-100, 100]"});
  p.logit_bias.clear();
  for (int32_t i = 0; i < 301; ++i) p.logit_bias[i] = 1.0f;
  expect_error([&] { p.validate(1000); }, {"logit_bias", "301", "300"});
  p.logit_bias.erase(300);
  EXPECT_NO_THROW(p.validate(1000));
}

}  // namespace
}  // namespace nanovllm
