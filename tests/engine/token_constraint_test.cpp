// Sequence::constraint (structured outputs) in the engine core, with a scripted constraint: the CPU sampler
// masks every token it refuses (greedy and sampled, logprobs of the masked logits), the scheduler reports
// each token, finishes a complete answer with "stop" (before min_tokens, max_tokens notwithstanding), aborts
// a request whose token was refused, and never schedules a constrained step ahead.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "engine/test_util.h"
#include "nanovllm/engine/sampler.h"
#include "nanovllm/engine/scheduler.h"
#include "nanovllm/kernels/cpu/token_bitmask.h"

namespace nanovllm {
namespace {

using test::make_seq;

// Allows the tokens in `allowed` (a fixed set), completes after `complete_after` tokens; records calls.
class ScriptedConstraint final : public TokenConstraint {
 public:
  ScriptedConstraint(std::vector<int32_t> allowed, int complete_after, bool active = true)
      : allowed_(std::move(allowed)), complete_after_(complete_after), active_(active) {}
  bool fill_bitmask(uint32_t* words, int64_t vocab) override {
    std::fill(words, words + (vocab + 31) / 32, 0u);
    for (int32_t t : allowed_) words[t >> 5] |= 1u << (t & 31);
    ++fills;
    return active_;
  }
  bool accept(int32_t token) override {
    accepted.push_back(token);
    return std::find(allowed_.begin(), allowed_.end(), token) != allowed_.end();
  }
  bool is_complete() const override { return static_cast<int>(accepted.size()) >= complete_after_; }
  std::vector<int32_t> accepted;
  int fills = 0;

 private:
  std::vector<int32_t> allowed_;
  int complete_after_;
  bool active_;
};

TEST(TokenBitmask, CpuKernelSetsExactlyTheRefusedTokensToMinusInfinity) {
  std::mt19937 rng(3);
  for (int64_t vocab : {1, 31, 32, 33, 100}) {
    const int64_t stride = vocab + 3, words = (vocab + 31) / 32;
    std::vector<float> logits(static_cast<size_t>(3 * stride));
    for (float& x : logits) x = static_cast<float>(rng() % 1000) / 100.0f;
    const std::vector<float> before = logits;
    std::vector<uint32_t> masks(static_cast<size_t>(2 * words));
    for (uint32_t& w : masks) w = static_cast<uint32_t>(rng());
    const std::vector<int32_t> rows = {2, 0};  // mask 0 -> row 2, mask 1 -> row 0; row 1 untouched
    cpu::apply_token_bitmask(logits.data(), stride, vocab, masks.data(), rows.data(), 2);
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t t = 0; t < stride; ++t) {
        const size_t i = static_cast<size_t>(r * stride + t);
        const int64_t m = r == 2 ? 0 : r == 0 ? 1 : -1;
        const bool refused = m >= 0 && t < vocab && !((masks[static_cast<size_t>(m * words + (t >> 5))] >> (t & 31)) & 1u);
        if (refused) {
          EXPECT_EQ(logits[i], -std::numeric_limits<float>::infinity());
        } else {
          EXPECT_EQ(logits[i], before[i]);
        }
      }
    }
  }
}

TEST(TokenConstraint, SamplerDrawsOnlyAllowedTokens) {
  std::mt19937 rng(5);
  const int64_t vocab = 500;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = static_cast<float>(rng() % 2000) / 100.0f - 10.0f;
  logits[7] = 50.0f;  // the unconstrained favourite, refused below
  for (float temperature : {0.0f, 1.0f, 3.0f}) {
    for (int draw = 0; draw < 20; ++draw) {
      SamplingParams p;
      p.temperature = temperature;
      p.logprobs = 3;
      auto seq = make_seq(draw, {1, 2}, p);
      seq->rng_state = rng();
      auto c = std::make_shared<ScriptedConstraint>(std::vector<int32_t>{3, 250, 499}, 100);
      seq->constraint = c;
      const SampledToken t = Sampler().sample_row(logits.data(), vocab, *seq);
      EXPECT_TRUE(t.token_id == 3 || t.token_id == 250 || t.token_id == 499) << t.token_id;
      EXPECT_EQ(c->fills, 1);
      // Logprobs are those of the masked logits: the three allowed tokens share all the mass.
      double mass = 0;
      for (const TokenLogprob& lp : t.top_logprobs) mass += std::exp(static_cast<double>(lp.logprob));
      EXPECT_NEAR(mass, 1.0, 1e-5);
    }
  }
  // An inactive constraint (reasoning before the answer) leaves the row alone.
  SamplingParams greedy;
  greedy.temperature = 0;
  auto seq = make_seq(1, {1}, greedy);
  seq->constraint = std::make_shared<ScriptedConstraint>(std::vector<int32_t>{3}, 100, /*active=*/false);
  EXPECT_EQ(Sampler().sample_row(logits.data(), vocab, *seq).token_id, 7);
}

EngineConfig small_config() {
  EngineConfig c;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 64;
  c.model.max_model_len = 256;
  c.cache.block_size = 4;
  c.cache.num_kv_blocks = 64;
  return c;
}

// One step, every sampled sequence given `token`.
void step(Scheduler& s, int32_t token) {
  SchedulerOutput out = s.schedule();
  std::vector<SampledToken> sampled;
  for (const ScheduledSequence& ss : out.seqs)
    if (ss.sample) sampled.push_back({ss.seq->seq_id, token, {}});
  s.update(out, sampled);
}

TEST(TokenConstraint, SchedulerFinishesCompleteAnswersAndAbortsRefusedTokens) {
  Scheduler s(small_config(), {0});
  SamplingParams p;
  p.max_tokens = 10;
  p.min_tokens = 5;  // a complete answer ends anyway: no token may follow it
  auto a = make_seq(1, {11, 12, 13}, p);
  auto ca = std::make_shared<ScriptedConstraint>(std::vector<int32_t>{42}, 3);
  a->constraint = ca;
  auto b = make_seq(2, {21, 22}, p);
  auto cb = std::make_shared<ScriptedConstraint>(std::vector<int32_t>{43}, 100);
  b->constraint = cb;
  s.add(std::move(a));
  s.add(std::move(b));

  step(s, 42);  // prefill: both sample; b refuses 42 -> aborted
  std::vector<std::unique_ptr<Sequence>> done = s.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->seq_id, 2);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(cb->accepted, std::vector<int32_t>{42});

  SchedulerOutput out = s.schedule();
  EXPECT_FALSE(s.can_schedule_ahead(out)) << "a constrained step's next mask needs its token";
  std::vector<SampledToken> sampled{{1, 42, {}}};
  s.update(out, sampled);
  step(s, 42);
  done = s.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->seq_id, 1);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(done[0]->num_output_tokens(), 3);
  EXPECT_EQ(ca->accepted, (std::vector<int32_t>{42, 42, 42}));
}

TEST(TokenConstraint, MaxTokensBeforeCompletionIsLength) {
  Scheduler s(small_config(), {0});
  SamplingParams p;
  p.max_tokens = 2;
  auto a = make_seq(1, {5, 6}, p);
  a->constraint = std::make_shared<ScriptedConstraint>(std::vector<int32_t>{9}, 100);
  s.add(std::move(a));
  step(s, 9);
  step(s, 9);
  const std::vector<std::unique_ptr<Sequence>> done = s.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace nanovllm
