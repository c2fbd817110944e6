#include "nanovllm/engine/scheduler.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <set>

#include "engine/test_util.h"
#include "nanovllm/core/error.h"

using namespace nanovllm;
using nanovllm::test::make_seq;
using nanovllm::test::random_tokens;

namespace {

EngineConfig small_config() {
  EngineConfig c;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 64;
  c.model.max_model_len = 256;
  c.cache.block_size = 4;
  c.cache.num_kv_blocks = 64;
  return c;
}

// The fake runner's "model": the next token depends only on the sequence and its position, so a
// sequence recomputed after a preemption produces the same continuation.
int32_t fake_next(int64_t seq_id, int64_t position) { return static_cast<int32_t>(1000 + seq_id * 100 + position); }

using NextFn = std::function<int32_t(const Sequence&)>;

// Checks the step's invariants, then plays the runner: one token per sample == true.
SchedulerOutput run_step(Scheduler& s, const NextFn& next = [](const Sequence& q) {
  return fake_next(q.seq_id, q.num_tokens());
}) {
  SchedulerOutput out = s.schedule();
  const EngineConfig& c = s.config();
  EXPECT_LE(out.num_tokens(), c.scheduler.max_num_batched_tokens);
  EXPECT_LE(static_cast<int64_t>(out.seqs.size()), c.scheduler.max_num_seqs);
  std::set<int64_t> ids;
  for (const auto& ss : out.seqs) {
    const Sequence& q = *ss.seq;
    EXPECT_TRUE(ids.insert(q.seq_id).second) << "scheduled twice";
    EXPECT_GE(ss.num_new_tokens, 1);
    EXPECT_LE(q.num_computed_tokens + ss.num_new_tokens, q.num_tokens());
    EXPECT_EQ(ss.sample, q.num_computed_tokens + ss.num_new_tokens == q.num_tokens());
    // KV slots exist for every token written this step.
    EXPECT_GE(static_cast<int64_t>(q.block_table.size()) * c.cache.block_size,
              q.num_computed_tokens + ss.num_new_tokens);
    EXPECT_EQ(q.status, SequenceStatus::kRunning);
  }
  std::vector<SampledToken> sampled;
  for (const auto& ss : out.seqs)
    if (ss.sample) sampled.push_back({ss.seq->seq_id, next(*ss.seq), {}});
  s.update(out, sampled);
  return out;
}

std::map<int64_t, std::unique_ptr<Sequence>> drain(Scheduler& s, int max_steps = 1000) {
  std::map<int64_t, std::unique_ptr<Sequence>> done;
  for (int i = 0; i < max_steps && s.has_unfinished(); ++i) {
    run_step(s);
    for (auto& f : s.take_finished()) done[f->seq_id] = std::move(f);
  }
  for (auto& f : s.take_finished()) done[f->seq_id] = std::move(f);
  EXPECT_FALSE(s.has_unfinished());
  return done;
}

SamplingParams max_tokens(int64_t n) {
  SamplingParams p;
  p.max_tokens = n;
  return p;
}

}  // namespace

TEST(Scheduler, TokenBudgetChunksAndDecodesGoFirst) {
  EngineConfig c = small_config();
  c.scheduler.max_num_batched_tokens = 10;
  Scheduler s(c, {});
  std::mt19937 rng(1);
  for (int i = 1; i <= 3; ++i) s.add(make_seq(i, random_tokens(rng, 7), max_tokens(5)));

  SchedulerOutput o1 = run_step(s);
  ASSERT_EQ(o1.seqs.size(), 2u);
  EXPECT_EQ(o1.seqs[0].seq->seq_id, 1);
  EXPECT_EQ(o1.seqs[0].num_new_tokens, 7);
  EXPECT_TRUE(o1.seqs[0].sample);
  EXPECT_EQ(o1.seqs[1].seq->seq_id, 2);
  EXPECT_EQ(o1.seqs[1].num_new_tokens, 3);  // chunked
  EXPECT_FALSE(o1.seqs[1].sample);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);

  // Step 2: seq 1 decodes first, seq 2 continues its prefill, seq 3 gets the rest of the budget.
  SchedulerOutput o2 = run_step(s);
  ASSERT_EQ(o2.seqs.size(), 3u);
  EXPECT_EQ(o2.seqs[0].seq->seq_id, 1);
  EXPECT_EQ(o2.seqs[0].num_new_tokens, 1);
  EXPECT_EQ(o2.seqs[1].seq->seq_id, 2);
  EXPECT_EQ(o2.seqs[1].num_new_tokens, 4);
  EXPECT_TRUE(o2.seqs[1].sample);
  EXPECT_EQ(o2.seqs[2].seq->seq_id, 3);
  EXPECT_EQ(o2.seqs[2].num_new_tokens, 5);
  EXPECT_FALSE(o2.seqs[2].sample);

  // Step 3: two decodes before seq 3's last 2 prompt tokens.
  SchedulerOutput o3 = run_step(s);
  ASSERT_EQ(o3.seqs.size(), 3u);
  EXPECT_EQ(o3.seqs[0].num_new_tokens, 1);
  EXPECT_EQ(o3.seqs[1].num_new_tokens, 1);
  EXPECT_EQ(o3.seqs[2].seq->seq_id, 3);
  EXPECT_EQ(o3.seqs[2].num_new_tokens, 2);
  EXPECT_TRUE(o3.seqs[2].sample);

  auto done = drain(s);
  ASSERT_EQ(done.size(), 3u);
  for (auto& [id, q] : done) {
    EXPECT_EQ(q->num_output_tokens(), 5);
    EXPECT_EQ(q->finish_reason, FinishReason::kLength);
    for (int64_t pos = q->num_prompt_tokens; pos < q->num_tokens(); ++pos)
      EXPECT_EQ(q->token_ids[pos], fake_next(id, pos));
  }
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

TEST(Scheduler, ChunkedPrefillSamplesOnlyAtTheEnd) {
  EngineConfig c = small_config();
  c.scheduler.max_num_batched_tokens = 8;
  Scheduler s(c, {});
  std::mt19937 rng(2);
  s.add(make_seq(7, random_tokens(rng, 25), max_tokens(3)));
  const std::vector<int64_t> chunks{8, 8, 8, 1};
  for (size_t i = 0; i < chunks.size(); ++i) {
    SchedulerOutput o = run_step(s);
    ASSERT_EQ(o.seqs.size(), 1u);
    EXPECT_EQ(o.seqs[0].num_new_tokens, chunks[i]);
    EXPECT_EQ(o.seqs[0].sample, i + 1 == chunks.size());
    EXPECT_EQ(o.seqs[0].seq->num_computed_tokens, 8 * static_cast<int64_t>(std::min<size_t>(i + 1, 3)) +
                                                      (i == 3 ? 1 : 0));
  }
  auto done = drain(s);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[7]->num_output_tokens(), 3);
}

TEST(Scheduler, ChunkingOffWaitsForAWholeFitAndRejectsHugePrompts) {
  EngineConfig c = small_config();
  c.scheduler.max_num_batched_tokens = 8;
  c.scheduler.enable_chunked_prefill = false;
  Scheduler s(c, {});
  std::mt19937 rng(3);
  EXPECT_THROW(s.add(make_seq(1, random_tokens(rng, 9))), Error);
  s.add(make_seq(2, random_tokens(rng, 6), max_tokens(2)));
  s.add(make_seq(3, random_tokens(rng, 6), max_tokens(2)));
  SchedulerOutput o1 = run_step(s);
  ASSERT_EQ(o1.seqs.size(), 1u);  // 6 + 6 > 8: seq 3 waits whole
  EXPECT_EQ(o1.seqs[0].num_new_tokens, 6);
  SchedulerOutput o2 = run_step(s);
  ASSERT_EQ(o2.seqs.size(), 2u);  // decode 1 + prompt 6 = 7 <= 8
  EXPECT_EQ(o2.seqs[1].num_new_tokens, 6);
  EXPECT_EQ(drain(s).size(), 2u);
}

TEST(Scheduler, MaxNumSeqsBoundsTheRunningSet) {
  EngineConfig c = small_config();
  c.scheduler.max_num_seqs = 2;
  Scheduler s(c, {});
  std::mt19937 rng(4);
  for (int i = 1; i <= 5; ++i) s.add(make_seq(i, random_tokens(rng, 3), max_tokens(4)));
  SchedulerOutput o = run_step(s);
  EXPECT_EQ(o.seqs.size(), 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 3);
  auto done = drain(s);
  EXPECT_EQ(done.size(), 5u);
}

TEST(Scheduler, PreemptionByRecomputeRestartsAndCompletes) {
  EngineConfig c = small_config();
  c.cache.block_size = 2;
  c.cache.num_kv_blocks = 6;  // 12 token slots for two sequences that each grow to 9 tokens
  c.cache.enable_prefix_caching = false;
  Scheduler s(c, {});
  s.add(make_seq(1, {11, 12, 13, 14}, max_tokens(5)));
  s.add(make_seq(2, {21, 22, 23, 24}, max_tokens(5)));

  bool saw_preemption = false;
  std::map<int64_t, std::unique_ptr<Sequence>> done;
  for (int step = 0; step < 100 && s.has_unfinished(); ++step) {
    const int64_t before = s.num_preemptions();
    run_step(s);
    if (s.num_preemptions() > before && !saw_preemption) {
      saw_preemption = true;
      // The later-admitted seq 2 was the victim: back in waiting, its blocks freed.
      EXPECT_EQ(s.num_waiting(), 1);
      EXPECT_EQ(s.num_running(), 1);
    }
    for (auto& f : s.take_finished()) done[f->seq_id] = std::move(f);
    EXPECT_LE(s.block_manager().num_used_blocks(), 6);
  }
  EXPECT_TRUE(saw_preemption);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[2]->num_preemptions, 1);
  EXPECT_EQ(done[1]->num_preemptions, 0);
  for (auto& [id, q] : done) {
    EXPECT_EQ(q->finish_reason, FinishReason::kLength);
    ASSERT_EQ(q->num_output_tokens(), 5);
    for (int64_t pos = 4; pos < 9; ++pos) EXPECT_EQ(q->token_ids[pos], fake_next(id, pos));
  }
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

TEST(Scheduler, PreemptedSequenceRecomputesGeneratedTokensAsPrompt) {
  EngineConfig c = small_config();
  c.cache.block_size = 2;
  c.cache.num_kv_blocks = 5;
  c.cache.enable_prefix_caching = false;
  Scheduler s(c, {});
  s.add(make_seq(1, {1, 2, 3}, max_tokens(6)));
  s.add(make_seq(2, {4, 5, 6}, max_tokens(6)));
  // Step 3: seq 1 takes the last free block; seq 2 (the last running) preempts itself with 3 prompt +
  // 2 generated tokens.
  for (int step = 0; step < 3; ++step) run_step(s);
  ASSERT_EQ(s.num_preemptions(), 1);
  ASSERT_EQ(s.num_waiting(), 1);
  // Once re-admitted, its first chunk recomputes all 5 tokens and samples the 6th.
  bool readmitted = false;
  for (int step = 0; step < 50 && !readmitted; ++step) {
    SchedulerOutput o = run_step(s);
    for (const auto& ss : o.seqs) {
      if (ss.seq->seq_id != 2) continue;
      EXPECT_EQ(ss.num_new_tokens, 5);
      EXPECT_TRUE(ss.sample);
      readmitted = true;
    }
  }
  EXPECT_TRUE(readmitted);
  auto done = drain(s);
  ASSERT_EQ(done.size(), 2u);
  for (auto& [id, q] : done) {
    EXPECT_EQ(q->num_output_tokens(), 6);
    for (int64_t pos = 3; pos < q->num_tokens(); ++pos) EXPECT_EQ(q->token_ids[pos], fake_next(id, pos));
  }
}

TEST(Scheduler, SequenceThatOutgrowsTheWholeCacheStopsWithLength) {
  EngineConfig c = small_config();
  c.cache.block_size = 2;
  c.cache.num_kv_blocks = 3;  // 6 slots
  Scheduler s(c, {});
  s.add(make_seq(1, {1, 2, 3, 4}, max_tokens(50)));
  auto done = drain(s, 100);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[1]->finish_reason, FinishReason::kLength);
  EXPECT_EQ(done[1]->num_tokens(), 7);  // 6 tokens computed; the 7th sampled but with no slot left
}

TEST(Scheduler, FinishesOnEosStopIdsMinTokensAndMaxTokens) {
  Scheduler s(small_config(), {99, 98});
  const int32_t kEos = 98;
  const int32_t kStopId = 77;
  SamplingParams eos = max_tokens(10);
  SamplingParams ignore = max_tokens(6);
  ignore.ignore_eos = true;
  SamplingParams min_tok = max_tokens(10);
  min_tok.min_tokens = 4;
  SamplingParams stop = max_tokens(10);
  stop.stop_token_ids = {kStopId};
  SamplingParams plain = max_tokens(10);
  s.add(make_seq(1, {5, 6, 7}, eos));
  s.add(make_seq(2, {5, 6, 7}, ignore));
  s.add(make_seq(3, {5, 6, 7}, min_tok));
  s.add(make_seq(4, {5, 6, 7}, stop));
  s.add(make_seq(5, {5, 6, 7}, plain));
  // Seqs 1-3 emit eos from their 2nd output on; seq 4 emits the stop id at its 3rd output, seq 5 emits
  // the stop id (not its stop id) and nothing else special.
  NextFn next = [&](const Sequence& q) -> int32_t {
    const int64_t k = q.num_output_tokens();  // index of the token being generated
    if (q.seq_id <= 3) return k >= 1 ? kEos : 50;
    if (q.seq_id == 4) return k == 2 ? kStopId : 51;
    return kStopId;
  };
  std::map<int64_t, std::unique_ptr<Sequence>> done;
  for (int step = 0; step < 100 && s.has_unfinished(); ++step) {
    run_step(s, next);
    for (auto& f : s.take_finished()) done[f->seq_id] = std::move(f);
  }
  ASSERT_EQ(done.size(), 5u);
  EXPECT_EQ(done[1]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(done[1]->num_output_tokens(), 2);
  EXPECT_EQ(done[1]->last_token(), kEos);  // the eos token is part of the output
  EXPECT_EQ(done[2]->finish_reason, FinishReason::kLength);
  EXPECT_EQ(done[2]->num_output_tokens(), 6);
  EXPECT_EQ(done[3]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(done[3]->num_output_tokens(), 4);  // eos before min_tokens does not stop
  EXPECT_EQ(done[4]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(done[4]->num_output_tokens(), 3);
  EXPECT_EQ(done[5]->finish_reason, FinishReason::kLength);
  EXPECT_EQ(done[5]->num_output_tokens(), 10);
  for (auto& [id, q] : done) {
    EXPECT_TRUE(q->is_finished());
    EXPECT_GE(q->first_token_time, q->arrival_time);
    EXPECT_GE(q->finish_time, q->first_token_time);
  }
  EXPECT_STREQ(to_string(done[1]->finish_reason), "stop");
  EXPECT_STREQ(to_string(done[2]->finish_reason), "length");
}

TEST(Scheduler, MaxModelLenCapsGeneration) {
  EngineConfig c = small_config();
  c.model.max_model_len = 9;
  Scheduler s(c, {});
  s.add(make_seq(1, {1, 2, 3, 4, 5}, max_tokens(100)));
  s.add(make_seq(2, {1, 2, 3, 4, 5, 6, 7, 8, 9}, max_tokens(100)));  // == max_model_len: one token
  auto done = drain(s);
  EXPECT_EQ(done[1]->num_tokens(), 9);
  EXPECT_EQ(done[1]->finish_reason, FinishReason::kLength);
  EXPECT_EQ(done[2]->num_output_tokens(), 1);
  EXPECT_EQ(done[2]->finish_reason, FinishReason::kLength);
}

TEST(Scheduler, RejectsBadRequests) {
  EngineConfig c = small_config();
  c.model.max_model_len = 100;
  c.cache.num_kv_blocks = 10;  // 40 slots
  Scheduler s(c, {});
  EXPECT_THROW(s.add(make_seq(1, {})), Error);
  EXPECT_THROW(s.add(make_seq(2, std::vector<int32_t>(101, 3))), Error);  // > max_model_len
  EXPECT_THROW(s.add(make_seq(3, std::vector<int32_t>(41, 3))), Error);   // > whole KV pool
  s.add(make_seq(4, std::vector<int32_t>(40, 3)));
  EXPECT_THROW(s.add(make_seq(4, {1})), Error);  // duplicate id
  EXPECT_THROW({ Scheduler bad(EngineConfig{}, {}); }, Error);  // num_kv_blocks unset
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(Scheduler, PrefixCacheSkipsSharedPromptBlocks) {
  EngineConfig c = small_config();
  Scheduler s(c, {});
  std::mt19937 rng(5);
  auto prompt = random_tokens(rng, 21);  // 5 full blocks of 4 + 1
  s.add(make_seq(1, prompt, max_tokens(2)));
  drain(s);
  s.add(make_seq(2, prompt, max_tokens(2)));
  SchedulerOutput o = run_step(s);
  ASSERT_EQ(o.seqs.size(), 1u);
  EXPECT_EQ(o.seqs[0].seq->num_cached_tokens, 20);
  EXPECT_EQ(o.seqs[0].num_new_tokens, 1);
  EXPECT_TRUE(o.seqs[0].sample);
  auto done = drain(s);
  EXPECT_EQ(done[2]->num_cached_tokens, 20);
  EXPECT_EQ(done[2]->token_ids[21], fake_next(2, 21));
}

TEST(Scheduler, AbortFreesBlocks) {
  Scheduler s(small_config(), {});
  std::mt19937 rng(6);
  s.add(make_seq(1, random_tokens(rng, 10), max_tokens(20)));
  s.add(make_seq(2, random_tokens(rng, 10), max_tokens(20)));
  run_step(s);
  EXPECT_GT(s.block_manager().num_used_blocks(), 0);
  s.add(make_seq(3, random_tokens(rng, 10)));
  EXPECT_TRUE(s.abort(1));
  EXPECT_TRUE(s.abort(3));  // waiting
  EXPECT_FALSE(s.abort(42));
  auto fin = s.take_finished();
  ASSERT_EQ(fin.size(), 2u);
  EXPECT_EQ(fin[0]->finish_reason, FinishReason::kAbort);
  EXPECT_STREQ(to_string(fin[1]->finish_reason), "abort");
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_TRUE(s.abort(2));
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
  EXPECT_FALSE(s.has_unfinished());
}

TEST(Scheduler, UpdateRejectsMismatchedSamples) {
  Scheduler s(small_config(), {});
  s.add(make_seq(1, {1, 2, 3}));
  SchedulerOutput o = s.schedule();
  EXPECT_THROW(s.update(o, {{2, 5, {}}}), Error);
}

TEST(Scheduler, LogprobsAndSeedKeys) {
  EngineConfig c = small_config();
  Scheduler s(c, {});
  SamplingParams p = max_tokens(2);
  p.logprobs = 2;
  p.seed = 1234;
  auto a = make_seq(1, {1, 2}, p);
  Sequence* a_ptr = a.get();
  s.add(std::move(a));
  auto b = make_seq(2, {1, 2}, p);
  Sequence* b_ptr = b.get();
  s.add(std::move(b));
  auto u1 = make_seq(3, {1, 2});
  Sequence* u1_ptr = u1.get();
  s.add(std::move(u1));
  auto u2 = make_seq(4, {1, 2});
  Sequence* u2_ptr = u2.get();
  s.add(std::move(u2));
  EXPECT_EQ(a_ptr->rng_state, b_ptr->rng_state);    // same seed, same key
  EXPECT_NE(u1_ptr->rng_state, u2_ptr->rng_state);  // engine RNG: distinct keys
  EXPECT_NE(u1_ptr->rng_state, a_ptr->rng_state);

  SchedulerOutput o = s.schedule();
  std::vector<SampledToken> st;
  for (const auto& ss : o.seqs)
    st.push_back({ss.seq->seq_id, 5, {{5, -0.5f}, {6, -1.5f}}});
  s.update(o, st);
  EXPECT_EQ(a_ptr->logprobs.size(), 1u);
  EXPECT_EQ(a_ptr->logprobs[0][1].id, 6);
  EXPECT_TRUE(u1_ptr->logprobs.empty());  // logprobs off
}

// Issue 45 (item 5): FCFS let one long prefill take every step's budget, so a short request behind it
// waited for the whole prompt. While a long prefill is pending, short ones (a quarter of the budget or
// less left) go first, whole, within half of the budget; the long one keeps the rest, so a stream of
// short requests cannot starve it either, and long ones keep their order.
TEST(Scheduler, ShortPrefillsAreNotStarvedByALongOne) {
  EngineConfig c = small_config();  // budget 64: short = at most 16 tokens left; the short lane: 32
  c.model.max_model_len = 1024;
  c.cache.num_kv_blocks = 512;
  Scheduler s(c, {});
  std::mt19937 rng(45);
  s.add(make_seq(1, random_tokens(rng, 600), max_tokens(2)));
  s.add(make_seq(2, random_tokens(rng, 600), max_tokens(2)));
  SchedulerOutput first = run_step(s);
  ASSERT_EQ(first.seqs.size(), 1u);
  EXPECT_EQ(first.seqs[0].num_new_tokens, 64);

  s.add(make_seq(3, random_tokens(rng, 8), max_tokens(2)));  // behind both long ones
  SchedulerOutput o = run_step(s);
  std::map<int64_t, ScheduledSequence> by_id;
  for (const auto& ss : o.seqs) by_id[ss.seq->seq_id] = ss;
  ASSERT_TRUE(by_id.count(3)) << "the short prompt waited behind the long ones";
  EXPECT_EQ(by_id[3].num_new_tokens, 8);
  EXPECT_TRUE(by_id[3].sample);
  EXPECT_EQ(by_id[1].num_new_tokens, 56);  // the long one keeps the rest
  EXPECT_FALSE(by_id.count(2));           // and long ones stay first come, first served

  // Six short prompts at once: the lane takes two (24 of its 32 tokens), the long one at least half.
  for (int id = 4; id <= 9; ++id) s.add(make_seq(id, random_tokens(rng, 12), max_tokens(2)));
  o = run_step(s);
  int64_t short_tokens = 0, long_tokens = 0;
  for (const auto& ss : o.seqs) {
    const int64_t id = ss.seq->seq_id;
    if (id >= 4) short_tokens += ss.num_new_tokens;
    if (id == 1) long_tokens = ss.num_new_tokens;
  }
  EXPECT_EQ(short_tokens, 24);
  EXPECT_GE(long_tokens, 32);

  auto done = drain(s);
  ASSERT_EQ(done.size(), 9u);
  for (auto& [id, q] : done) {
    EXPECT_EQ(q->num_output_tokens(), 2) << id;
    for (int64_t pos = q->num_prompt_tokens; pos < q->num_tokens(); ++pos)
      EXPECT_EQ(q->token_ids[pos], fake_next(id, pos));
  }
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

// Issue 45 (item 4): the n sequences of one request share its prompt while they wait (one token vector,
// not n copies) and each takes its own copy only when admitted, when it also takes its KV blocks.
TEST(Scheduler, SharedPromptIsCopiedOnlyOnAdmission) {
  EngineConfig c = small_config();
  c.scheduler.max_num_seqs = 2;
  Scheduler s(c, {});
  std::mt19937 rng(4);
  const auto prompt = std::make_shared<const std::vector<int32_t>>(random_tokens(rng, 10));
  for (int64_t id = 1; id <= 5; ++id) {
    auto q = std::make_unique<Sequence>();
    q->seq_id = id;
    q->num_prompt_tokens = 10;
    q->shared_prompt = prompt;
    q->params = max_tokens(3);
    s.add(std::move(q));
  }
  EXPECT_EQ(prompt.use_count(), 6);
  SchedulerOutput o = run_step(s);
  ASSERT_EQ(o.seqs.size(), 2u);
  for (const auto& ss : o.seqs) {
    EXPECT_EQ(ss.seq->shared_prompt, nullptr);
    EXPECT_TRUE(std::equal(prompt->begin(), prompt->end(), ss.seq->token_ids.begin()));
  }
  EXPECT_EQ(prompt.use_count(), 4);  // the three still waiting
  EXPECT_TRUE(s.abort(5));           // a waiting one finishes with its prompt and nothing else
  auto aborted = s.take_finished();
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(aborted[0]->num_tokens(), 10);
  EXPECT_EQ(aborted[0]->num_output_tokens(), 0);
  auto done = drain(s);
  ASSERT_EQ(done.size(), 4u);
  for (auto& [id, q] : done) {
    EXPECT_TRUE(std::equal(prompt->begin(), prompt->end(), q->token_ids.begin()));
    ASSERT_EQ(q->num_output_tokens(), 3);
    for (int64_t pos = 10; pos < 13; ++pos) EXPECT_EQ(q->token_ids[pos], fake_next(id, pos));
  }
  EXPECT_EQ(prompt.use_count(), 2);  // this test's and the aborted sequence's
}
