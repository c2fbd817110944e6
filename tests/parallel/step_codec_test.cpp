// The step channel's codec (parallel/step_codec.h): after every message the worker's copy of each scheduled
// sequence equals node 0's in every field a runner reads, while node 0's sequences change the way the
// engine changes them (prefill chunks, decode tokens, placeholder tokens resolved or dropped, blocks
// appended, preemption emptying the table, a sequence idle long enough to be forgotten and sent again).
#include <gtest/gtest.h>

#include <random>

#include "nanovllm/parallel/step_codec.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

void expect_copy(const Sequence& want, const Sequence& got) {
  SCOPED_TRACE("request " + std::to_string(want.seq_id));
  EXPECT_EQ(got.seq_id, want.seq_id);
  EXPECT_EQ(got.token_ids, want.token_ids);
  EXPECT_EQ(got.block_table, want.block_table);
  EXPECT_EQ(got.num_prompt_tokens, want.num_prompt_tokens);
  EXPECT_EQ(got.num_computed_tokens, want.num_computed_tokens);
  EXPECT_EQ(got.num_cached_tokens, want.num_cached_tokens);
  EXPECT_EQ(got.rng_state, want.rng_state);
  EXPECT_EQ(got.params.temperature, want.params.temperature);
  EXPECT_EQ(got.params.top_k, want.params.top_k);
  EXPECT_EQ(got.params.top_p, want.params.top_p);
  EXPECT_EQ(got.params.min_p, want.params.min_p);
  EXPECT_EQ(got.params.repetition_penalty, want.params.repetition_penalty);
  EXPECT_EQ(got.params.presence_penalty, want.params.presence_penalty);
  EXPECT_EQ(got.params.frequency_penalty, want.params.frequency_penalty);
  EXPECT_EQ(got.params.seed, want.params.seed);
  EXPECT_EQ(got.params.max_tokens, want.params.max_tokens);
  EXPECT_EQ(got.params.min_tokens, want.params.min_tokens);
  EXPECT_EQ(got.params.ignore_eos, want.params.ignore_eos);
  EXPECT_EQ(got.params.stop_token_ids, want.params.stop_token_ids);
  EXPECT_EQ(got.params.logprobs, want.params.logprobs);
  EXPECT_EQ(got.params.logit_bias, want.params.logit_bias);
}

// Sends `out` through a fresh encoding and checks the decoded step against it.
void round_trip(StepEncoder& enc, StepDecoder& dec, StepOp op, const SchedulerOutput& out, bool fed) {
  const DecodedStep step = dec.decode(enc.encode(op, &out, fed));
  EXPECT_EQ(step.op, op);
  EXPECT_EQ(step.fed_from_previous, fed);
  ASSERT_EQ(step.out.seqs.size(), out.seqs.size());
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    EXPECT_EQ(step.out.seqs[i].num_new_tokens, out.seqs[i].num_new_tokens);
    EXPECT_EQ(step.out.seqs[i].sample, out.seqs[i].sample);
    expect_copy(*out.seqs[i].seq, *step.out.seqs[i].seq);
  }
}

TEST(StepCodec, WorkerCopiesFollowTheEnginesSequences) {
  std::mt19937 rng(7);
  std::vector<Sequence> seqs(5);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = seqs[i];
    s.seq_id = static_cast<int64_t>(100 + i);
    for (int t = 0; t < 20 + 13 * static_cast<int>(i); ++t) s.token_ids.push_back(static_cast<int32_t>(rng() % 1000));
    s.num_prompt_tokens = s.num_tokens();
    s.rng_state = rng();
    s.params.temperature = 0.25f * static_cast<float>(i);
    s.params.top_k = static_cast<int64_t>(i) * 3;
    s.params.seed = i % 2 ? std::optional<uint64_t>(rng()) : std::nullopt;
    s.params.stop_token_ids = {static_cast<int64_t>(i), 7};
    s.params.logit_bias = {{3, -100.f}, {static_cast<int32_t>(i), 2.5f}};
    s.params.logprobs = static_cast<int64_t>(i);
    s.params.min_tokens = 2;
    s.params.repetition_penalty = 1.1f;
  }
  StepEncoder enc;
  StepDecoder dec;
  const int64_t block = 16;
  for (int step = 0; step < 300; ++step) {
    SchedulerOutput out;
    for (Sequence& s : seqs) {
      if (rng() % 4 == 0) continue;  // not scheduled this step
      ScheduledSequence sc{&s, 0, false};
      if (s.num_computed_tokens < s.num_prompt_tokens) {  // a prefill chunk
        sc.num_new_tokens = std::min<int64_t>(s.num_prompt_tokens - s.num_computed_tokens, 16);
      } else {
        // Decode: the last token is real, or a placeholder (scheduled ahead) resolved or dropped later.
        if (!s.token_ids.empty() && s.token_ids.back() == kPendingToken) {
          if (rng() % 3 == 0) s.token_ids.pop_back();  // the step that sampled it failed
          else s.token_ids.back() = static_cast<int32_t>(rng() % 1000);
        }
        s.token_ids.push_back(rng() % 2 ? kPendingToken : static_cast<int32_t>(rng() % 1000));
        sc.num_new_tokens = 1;
      }
      sc.sample = s.num_computed_tokens + sc.num_new_tokens >= s.num_prompt_tokens;
      while (static_cast<int64_t>(s.block_table.size()) * block < s.num_tokens())
        s.block_table.push_back(static_cast<int32_t>(rng() % 4096));
      if (rng() % 40 == 0) {  // preempted and readmitted: a new table, prefilled again
        s.block_table.clear();
        for (int64_t b = 0; b * block < s.num_tokens(); ++b) s.block_table.push_back(static_cast<int32_t>(rng() % 4096));
        s.num_cached_tokens = 8;
      }
      out.seqs.push_back(sc);
    }
    const bool fed = rng() % 2 == 0;
    round_trip(enc, dec, fed ? StepOp::kLaunch : StepOp::kExecute, out, fed);
    for (const ScheduledSequence& sc : out.seqs) sc.seq->num_computed_tokens += sc.num_new_tokens;
    if (::testing::Test::HasFailure()) FAIL() << "step " << step;
  }
  EXPECT_EQ(dec.num_known(), enc.num_known());
  EXPECT_EQ(dec.decode(enc.encode(StepOp::kWaitOldest)).op, StepOp::kWaitOldest);
  EXPECT_EQ(dec.decode(enc.encode(StepOp::kShutdown)).op, StepOp::kShutdown);
}

TEST(StepCodec, DecodeTokensNotTheWholeSequence) {
  Sequence s;
  s.seq_id = 1;
  s.token_ids.assign(10000, 5);
  s.num_prompt_tokens = 10000;
  s.block_table.assign(625, 9);
  StepEncoder enc;
  StepDecoder dec;
  SchedulerOutput out;
  out.seqs.push_back({&s, 10000, true});
  EXPECT_GT(enc.encode(StepOp::kExecute, &out).size(), 40000u);  // the first message carries it all
  s.num_computed_tokens = 10000;
  s.token_ids.push_back(6);
  s.block_table.push_back(10);
  out.seqs[0].num_new_tokens = 1;
  const std::string decode = enc.encode(StepOp::kExecute, &out);
  EXPECT_LT(decode.size(), 300u);  // one token, one block id and the counters
}

TEST(StepCodec, IdleSequencesAreForgottenOnBothSidesAndSentWholeAgain) {
  Sequence a, b;
  a.seq_id = 1;
  a.token_ids = {1, 2, 3};
  a.num_prompt_tokens = 3;
  a.params.temperature = 0.5f;
  b.seq_id = 2;
  b.token_ids = {4};
  b.num_prompt_tokens = 1;
  StepEncoder enc;
  StepDecoder dec;
  SchedulerOutput both, only_b;
  both.seqs = {{&a, 3, true}, {&b, 1, true}};
  only_b.seqs = {{&b, 0, false}};
  round_trip(enc, dec, StepOp::kExecute, both, false);
  for (int64_t i = 0; i < kForgetAfterSteps - 1; ++i) dec.decode(enc.encode(StepOp::kExecute, &only_b));
  EXPECT_NE(dec.find(1), nullptr);
  dec.decode(enc.encode(StepOp::kExecute, &only_b));
  EXPECT_EQ(dec.find(1), nullptr);
  EXPECT_EQ(enc.num_known(), 1u);
  a.token_ids.push_back(9);
  round_trip(enc, dec, StepOp::kExecute, both, false);  // a comes back whole
}

TEST(StepCodec, MalformedMessagesAreClearErrors) {
  Sequence s;
  s.seq_id = 3;
  s.token_ids = {1, 2};
  s.num_prompt_tokens = 2;
  SchedulerOutput out;
  out.seqs = {{&s, 2, true}};
  StepEncoder enc;
  const std::string first = enc.encode(StepOp::kExecute, &out);
  const std::string second = enc.encode(StepOp::kExecute, &out);
  testing::expect_error([&] { StepDecoder().decode(first.substr(0, first.size() - 3)); },
                        {"step message: truncated"});
  testing::expect_error([&] { StepDecoder().decode(first + "x"); }, {"step message: 1 bytes left over"});
  testing::expect_error([&] { StepDecoder().decode(second); },  // it skipped the first message
                        {"step message: request 3 is not known to this worker"});
  testing::expect_error([&] { StepDecoder().decode(std::string(1, '\x09') + '\0'); }, {"step message: unknown op 9"});
  testing::expect_error([&] { enc.encode(StepOp::kExecute); }, {"needs a step"});
}

}  // namespace
}  // namespace nanovllm
