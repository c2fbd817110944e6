// Async scheduling (EngineConfig::async_scheduling): step N + 1 is scheduled and launched before step
// N's tokens are read. It must give every request exactly what scheduling after each step gives:
// tokens, finish reasons and logprobs (an aborted request: a prefix of the same tokens), with stops at EOS / stop ids / max_tokens / max_model_len,
// aborts and new requests arriving between steps, penalties (never scheduled ahead), logit_bias (scheduled
// ahead) and preemption.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "nanovllm/llm/llm_engine.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams params;
  int64_t add_before_step = 0;     // step() calls made before the request is added
  int64_t abort_before_step = -1;  // aborted before this step() call (-1: never)
};

struct RunResult {
  std::map<int64_t, RequestOutput> outputs;  // by index into the requests
  LLMEngine::StepStats stats;
};

RunResult run(EngineConfig ec, const std::vector<Request>& requests) {
  LLMEngine engine(ec);
  std::map<int64_t, size_t> index_of;  // request id -> index
  std::map<size_t, int64_t> id_of;
  RunResult r;
  for (int64_t step = 0;; ++step) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].add_before_step == step) {
        const int64_t id = engine.add_request(requests[i].prompt, requests[i].params);
        index_of[id] = i;
        id_of[i] = id;
      }
      if (requests[i].abort_before_step == step && id_of.contains(i)) engine.abort_request(id_of[i]);
    }
    bool pending = false;
    for (const Request& q : requests) pending |= q.add_before_step > step;
    if (!engine.has_unfinished() && !pending) break;
    for (RequestOutput& o : engine.step()) r.outputs[static_cast<int64_t>(index_of.at(o.request_id))] = std::move(o);
    EXPECT_LT(step, 10000) << "the engine does not finish";
    if (step >= 10000) break;
  }
  r.stats = engine.step_stats();
  return r;
}

void expect_same_outputs(const RunResult& async, const RunResult& sync) {
  ASSERT_EQ(async.outputs.size(), sync.outputs.size());
  for (const auto& [i, want] : sync.outputs) {
    SCOPED_TRACE("request " + std::to_string(i));
    const RequestOutput& got = async.outputs.at(i);
    EXPECT_EQ(got.finish_reason, want.finish_reason);
    if (want.finish_reason == FinishReason::kAbort) {
      // How many tokens an aborted request got depends on when steps ran: scheduled ahead, a request
      // added between steps joins one step later (the step after the one already launched). The
      // tokens it got are the same ones.
      const size_t n = std::min(got.token_ids.size(), want.token_ids.size());
      EXPECT_GT(n, 0u);
      EXPECT_TRUE(std::equal(got.token_ids.begin(), got.token_ids.begin() + n, want.token_ids.begin()));
      continue;
    }
    EXPECT_EQ(got.token_ids, want.token_ids);
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t t = 0; t < want.logprobs.size(); ++t) {
      ASSERT_EQ(got.logprobs[t].size(), want.logprobs[t].size());
      for (size_t k = 0; k < want.logprobs[t].size(); ++k) {
        EXPECT_EQ(got.logprobs[t][k].id, want.logprobs[t][k].id);
        EXPECT_NEAR(got.logprobs[t][k].logprob, want.logprobs[t][k].logprob, 1e-4);
      }
    }
  }
}

class AsyncScheduling : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.model.path = testing::tiny_model_dir("async-scheduling", {{"num_hidden_layers", 2}}, 7);
    base_.model.backend = Backend::kCpu;
    base_.cache.block_size = 8;
    base_.scheduler.max_num_batched_tokens = 256;
    base_.cache.kv_cache_bytes = 16LL << 20;
  }

  // Runs `requests` scheduled ahead and not; the same outputs, and the ahead run really scheduled ahead.
  RunResult compare(const std::vector<Request>& requests, EngineConfig ec) {
    ec.scheduler.async_scheduling = false;
    const RunResult sync = run(ec, requests);
    EXPECT_EQ(sync.stats.scheduled_ahead_steps, 0);
    ec.scheduler.async_scheduling = true;
    RunResult async = run(ec, requests);
    expect_same_outputs(async, sync);
    return async;
  }

  static SamplingParams greedy(int64_t max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
  }

  EngineConfig base_;
};

TEST_F(AsyncScheduling, LengthStopsAndSeededSamplingMatch) {
  const auto prompts = random_prompts({5, 9, 17, 3}, 512, 11);
  std::vector<Request> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(6 + 5 * static_cast<int64_t>(i));  // finishing at different steps
    if (i % 2 == 1) {
      p.temperature = 0.8f;  // the draw depends on the step index: must see the pending token counted
      p.top_p = 0.9f;
      p.seed = 100 + i;
    }
    p.logprobs = i == 2 ? 3 : 0;
    requests.push_back({prompts[i], p});
  }
  const RunResult async = compare(requests, base_);
  EXPECT_GT(async.stats.scheduled_ahead_steps, 10);
}

TEST_F(AsyncScheduling, StopTokensEndSequencesWhoseNextStepWasLaunched) {
  // Stop ids taken from the plain run's own output, so a sequence stops mid-way while the step after
  // it has already been launched for it.
  const auto prompts = random_prompts({7, 12, 4}, 512, 12);
  std::vector<Request> requests;
  for (const auto& p : prompts) requests.push_back({p, greedy(24)});
  EngineConfig sync_config = base_;
  sync_config.scheduler.async_scheduling = false;
  const RunResult plain = run(sync_config, requests);
  requests[0].params.stop_token_ids = {plain.outputs.at(0).token_ids.at(5)};
  requests[1].params.stop_token_ids = {plain.outputs.at(1).token_ids.at(9)};
  const RunResult async = compare(requests, base_);
  EXPECT_LT(async.outputs.at(0).token_ids.size(), 24u);
  EXPECT_EQ(async.outputs.at(0).finish_reason, FinishReason::kStop);
  EXPECT_EQ(async.outputs.at(1).finish_reason, FinishReason::kStop);
  EXPECT_GT(async.stats.scheduled_ahead_steps, 10);
}

TEST_F(AsyncScheduling, AbortsAndArrivalsBetweenSteps) {
  const auto prompts = random_prompts({6, 11, 3, 20, 8}, 512, 13);
  std::vector<Request> requests = {
      {prompts[0], greedy(30), 0, 9},    // aborted while decoding
      {prompts[1], greedy(20), 0, -1},
      {prompts[2], greedy(15), 5, -1},   // arrives while the others decode
      {prompts[3], greedy(12), 12, 14},  // arrives, then is aborted
      {prompts[4], greedy(10), 25, -1},  // arrives after a stretch of decodes
  };
  const RunResult async = compare(requests, base_);
  EXPECT_EQ(async.outputs.at(0).finish_reason, FinishReason::kAbort);
  EXPECT_EQ(async.outputs.at(3).finish_reason, FinishReason::kAbort);
  EXPECT_GT(async.stats.scheduled_ahead_steps, 10);
}

TEST_F(AsyncScheduling, EverySequenceStoppingAtOnceLeavesNothingBehind) {
  // Both reach max_tokens at the same step: the step after it is not launched at all.
  const auto prompts = random_prompts({4, 9, 5}, 512, 14);
  std::vector<Request> requests = {{prompts[0], greedy(8)}, {prompts[1], greedy(8)}};
  const RunResult by_length = compare(requests, base_);
  // Prefill, then 7 decodes of which the first 6 launch the next one ahead.
  EXPECT_EQ(by_length.stats.scheduled_ahead_steps, 6);
  // The last sequence stops at a stop id while its next step is launched: that step is left behind
  // with no sequence, and the engine serves the request that arrives later.
  EngineConfig sync_config = base_;
  sync_config.scheduler.async_scheduling = false;
  const RunResult plain = run(sync_config, {{prompts[0], greedy(20)}});
  requests = {{prompts[0], greedy(20)}, {prompts[2], greedy(6), 30, -1}};
  requests[0].params.stop_token_ids = {plain.outputs.at(0).token_ids.at(10)};
  const RunResult async = compare(requests, base_);
  EXPECT_EQ(async.outputs.at(0).finish_reason, FinishReason::kStop);
  EXPECT_EQ(async.outputs.at(1).token_ids.size(), 6u);
}

TEST_F(AsyncScheduling, MaxModelLenPenaltiesAndPreemption) {
  EngineConfig ec = base_;
  ec.model.max_model_len = 40;
  ec.cache.num_kv_blocks = 9;  // 72 token slots for 3 growing sequences: preemption by recompute
  const auto prompts = random_prompts({20, 14, 10}, 512, 16);
  std::vector<Request> requests = {{prompts[0], greedy(100)}, {prompts[1], greedy(22)}, {prompts[2], greedy(25)}};
  requests[1].params.repetition_penalty = 1.3f;  // a penalty row: its steps are never scheduled ahead
  requests[1].params.frequency_penalty = 0.2f;
  const RunResult async = compare(requests, ec);
  EXPECT_EQ(async.outputs.at(0).token_ids.size(), 20u);  // stopped by max_model_len
  EXPECT_EQ(async.outputs.at(0).finish_reason, FinishReason::kLength);
  EXPECT_GT(async.stats.scheduled_ahead_steps, 0);
}

TEST_F(AsyncScheduling, LogitBiasRowsAreScheduledAheadAndTakeEffect) {
  // Unlike penalties, logit_bias does not depend on the tokens sampled so far: its rows are scheduled
  // ahead like any other, with the same tokens as scheduling after each step.
  const auto prompts = random_prompts({6, 10, 4}, 512, 17);
  EngineConfig sync_config = base_;
  sync_config.scheduler.async_scheduling = false;
  const RunResult plain = run(sync_config, {{prompts[1], greedy(12)}});
  std::vector<Request> requests = {{prompts[0], greedy(12)}, {prompts[1], greedy(12)}, {prompts[2], greedy(12)}};
  requests[0].params.logit_bias = {{42, 100.0f}};  // forces token 42
  for (int32_t t : plain.outputs.at(0).token_ids) requests[1].params.logit_bias[t] = -100.0f;  // bans them
  requests[2].params.temperature = 0.9f;
  requests[2].params.seed = 5;
  requests[2].params.logit_bias = {{7, 3.0f}, {8, -2.5f}, {300, 1.25f}};
  const RunResult async = compare(requests, base_);
  EXPECT_GT(async.stats.scheduled_ahead_steps, 8);
  EXPECT_EQ(async.outputs.at(0).token_ids, std::vector<int32_t>(12, 42));
  for (int32_t t : async.outputs.at(1).token_ids)
    EXPECT_EQ(requests[1].params.logit_bias.count(t), 0u) << "banned token " << t << " was generated";
}

}  // namespace
}  // namespace nanovllm
