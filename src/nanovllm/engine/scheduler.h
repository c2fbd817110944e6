// Scheduler: decides which tokens of which sequences run in each step (vLLM v1 style).
//
// Each step has a token budget (max_num_batched_tokens). Running sequences that need one token (decodes)
// go first; if a decode needs a new KV block and none is free, the most recently admitted running
// sequence is preempted by recompute (blocks freed, num_computed_tokens = 0, pushed to the FRONT of the
// waiting queue with its generated tokens kept, to be recomputed as part of its "prompt"). Then running
// sequences still in (chunked) prefill continue, then waiting sequences are admitted in FCFS order while
// budget, max_num_seqs and KV blocks allow (no admissions in a step that preempted). A prompt larger than
// the remaining budget is chunked (enable_chunked_prefill) or waits for a step where it fits whole.
//
// Fairness (chunked prefill only): FCFS alone lets one long prefill take every step's budget, so a request
// of 8 tokens behind 8 x 40K tokens of prompt would wait for all of them. So while a long prefill is
// pending (one with more than a quarter of the step budget left to compute, running or waiting), short
// ones go first, each whole, within half of the budget the decodes left: running ones, then waiting ones
// in arrival order, passing over long ones ahead of them (the "short lane"). The long ones then share the
// rest as above, so they keep at least half of every step whatever stream of short requests arrives.
// Admission allocates blocks for all of a sequence's tokens at once, so a prefill never runs out of
// blocks midway; decodes grow the block table one block at a time.
//
// Ownership: the scheduler owns every unfinished Sequence; SchedulerOutput holds raw pointers valid
// until the matching update(). Call order per step: schedule() -> run the model -> update() (or, scheduling
// ahead: schedule() -> run -> advance() -> schedule() -> resolve(), see can_schedule_ahead()).
// abort() must not be called between schedule() and update() for a sequence in that step.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_set>
#include <vector>

#include "nanovllm/engine/block_manager.h"
#include "nanovllm/engine/config.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/engine/sequence.h"

namespace nanovllm {

class Scheduler {
 public:
  // `config` as resolved by EngineConfig::resolve, with cache.num_kv_blocks the KV pool's size (this
  // lane's blocks: LLMEngine gives the offload lane its own config). eos_token_ids finish a sequence
  // unless params.ignore_eos.
  Scheduler(const EngineConfig& config, std::vector<int64_t> eos_token_ids);

  // Queues a new request. Sets status = kWaiting, num_prompt_tokens (= token_ids.size() if 0),
  // arrival_time (if unset), rng_state (from params.seed, else from the engine RNG) and, with prefix
  // caching, the prompt's block hashes (Sequence::block_hashes; resolve() extends them).
  // Throws nanovllm::Error for: an empty prompt, a prompt longer than max_model_len, a prompt needing
  // more KV blocks than the whole pool, a prompt longer than max_num_batched_tokens with chunked prefill
  // off, a duplicate seq_id. Does not validate params against the vocab (SamplingParams::validate does).
  void add(std::unique_ptr<Sequence> seq);

  SchedulerOutput schedule();

  // After the runner: `sampled` holds one entry per ScheduledSequence with sample == true, in order.
  // Advances num_computed_tokens, commits full blocks to the prefix cache, appends sampled tokens
  // (+ logprobs when params.logprobs > 0), finishes sequences (eos / stop ids / max_tokens / max_model_len)
  // and frees their blocks. update() = advance() then resolve().
  void update(const SchedulerOutput& out, const std::vector<SampledToken>& sampled);

  // Scheduling ahead (the engine's async scheduling): while step N runs on the device, the engine
  // schedules step N + 1 before it knows N's tokens. advance(out_N) does update()'s bookkeeping with
  // kPendingToken in place of each sampled token, schedule() then gives out_{N+1}, and resolve(out_N,
  // tokens) writes the real tokens over the placeholders and finishes sequences as update() would
  // (a sequence that finishes at N has a wasted row in N + 1, which the engine drops).
  // can_schedule_ahead(out_N) holds when out_{N+1} would be out_N's sequences, all decoding again,
  // without preemption: nothing waiting, every running sequence a sampling decode of out_N, no token
  // penalties (their device inputs list token ids), no structured-output constraint (its mask needs N's
  // token), none reaching max_model_len at N, not all reaching
  // max_tokens at N (a step wholly wasted), blocks for all.
  bool can_schedule_ahead(const SchedulerOutput& out) const;
  void advance(const SchedulerOutput& out);
  void resolve(const SchedulerOutput& out, const std::vector<SampledToken>& sampled);

  // Finished sequences (including aborted ones) since the last call, in finishing order.
  std::vector<std::unique_ptr<Sequence>> take_finished();

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  // Finishes a waiting or running sequence with FinishReason::kAbort; false if not found.
  bool abort(int64_t seq_id);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }  // total since construction
  const BlockManager& block_manager() const { return blocks_; }
  const EngineConfig& config() const { return config_; }

 private:
  // Allocates a waiting sequence's blocks, takes its own copy of a shared prompt, marks it running; returns
  // the tokens it has left to compute (its prompt less the prefix-cache hits).
  int64_t admit(Sequence& s);
  int64_t short_prefill_tokens() const;  // a prefill with at most this many tokens left is short
  bool long_prefill_pending(int64_t short_max) const;
  void preempt(std::unique_ptr<Sequence> seq);
  void finish(std::unique_ptr<Sequence> seq, FinishReason reason);
  FinishReason stop_reason(const Sequence& seq) const;  // after a token was appended

  EngineConfig config_;
  std::vector<int64_t> eos_token_ids_;
  BlockManager blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<std::unique_ptr<Sequence>> finished_;
  std::unordered_set<int64_t> live_ids_;
  uint64_t engine_rng_;
  int64_t num_preemptions_ = 0;
};

}  // namespace nanovllm
