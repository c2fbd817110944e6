#include "nanovllm/engine/scheduler.h"

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/core/rng.h"

namespace nanovllm {

Scheduler::Scheduler(const EngineConfig& config, std::vector<int64_t> eos_token_ids)
    : config_(config),
      eos_token_ids_(std::move(eos_token_ids)),
      blocks_(config_.cache.num_kv_blocks, config_.cache.block_size, config_.cache.enable_prefix_caching),
      engine_rng_(splitmix64(config_.model.seed)) {}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  NANOVLLM_CHECK(seq != nullptr, "Scheduler::add: null sequence");
  const int64_t n = seq->num_tokens();
  NANOVLLM_CHECK(n >= 1, "request ", seq->seq_id, ": the prompt is empty");
  if (seq->num_prompt_tokens == 0) seq->num_prompt_tokens = n;
  NANOVLLM_CHECK(seq->num_prompt_tokens == n, "request ", seq->seq_id, ": num_prompt_tokens (",
                 seq->num_prompt_tokens, ") != token_ids.size() (", n, ")");
  NANOVLLM_CHECK(n <= config_.model.max_model_len, "request ", seq->seq_id, ": prompt of ", n,
                 " tokens is longer than max_model_len = ", config_.model.max_model_len);
  NANOVLLM_CHECK(blocks_.blocks_for(n) <= blocks_.num_blocks(), "request ", seq->seq_id, ": prompt of ", n,
                 " tokens needs ", blocks_.blocks_for(n), " KV blocks, the whole cache has ",
                 blocks_.num_blocks());
  NANOVLLM_CHECK(config_.scheduler.enable_chunked_prefill || n <= config_.scheduler.max_num_batched_tokens,
                 "request ", seq->seq_id, ": prompt of ", n, " tokens is longer than max_num_batched_tokens = ",
                 config_.scheduler.max_num_batched_tokens, " and chunked prefill is off");
  NANOVLLM_CHECK(!live_ids_.contains(seq->seq_id), "request id ", seq->seq_id, " is already in use");
  live_ids_.insert(seq->seq_id);

  seq->status = SequenceStatus::kWaiting;
  seq->finish_reason = FinishReason::kNone;
  seq->num_computed_tokens = 0;
  seq->num_cached_tokens = 0;
  seq->block_table.clear();
  // The prompt's block hashes, once: admission checks and commits reuse them (block_manager.h).
  seq->reset_block_hashes(config_.cache.enable_prefix_caching ? config_.cache.block_size : 0);
  if (seq->arrival_time == std::chrono::steady_clock::time_point{})
    seq->arrival_time = std::chrono::steady_clock::now();
  if (seq->params.seed) {
    seq->rng_state = rng_key_from_seed(*seq->params.seed);
  } else {
    engine_rng_ = splitmix64(engine_rng_);
    seq->rng_state = engine_rng_;
  }
  waiting_.push_back(std::move(seq));
}

void Scheduler::preempt(std::unique_ptr<Sequence> seq) {
  blocks_.free(*seq);
  seq->num_computed_tokens = 0;
  seq->num_cached_tokens = 0;
  seq->status = SequenceStatus::kWaiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  NANOVLLM_DEBUG("preempting request ", seq->seq_id, " (", seq->num_tokens(), " tokens) by recompute");
  waiting_.push_front(std::move(seq));
}

void Scheduler::finish(std::unique_ptr<Sequence> seq, FinishReason reason) {
  blocks_.free(*seq);
  seq->status = SequenceStatus::kFinished;
  seq->finish_reason = reason;
  seq->finish_time = std::chrono::steady_clock::now();
  live_ids_.erase(seq->seq_id);
  finished_.push_back(std::move(seq));
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.scheduler.max_num_batched_tokens;
  bool preempted = false;

  // 1. Decodes: running sequences with exactly one token left to compute, in admission order.
  //    Victims are taken from the back of running_, i.e. never a sequence already scheduled here.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& s = *running_[i];
    if (s.num_tokens() - s.num_computed_tokens != 1) {
      ++i;
      continue;
    }
    while (!blocks_.can_append(s, 1) && running_.size() - 1 > i) {
      std::unique_ptr<Sequence> victim = std::move(running_.back());
      running_.pop_back();
      preempt(std::move(victim));
      preempted = true;
    }
    if (!blocks_.can_append(s, 1)) {
      std::unique_ptr<Sequence> self = std::move(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      if (i == 0) {
        // Alone and still out of blocks: the sequence fills the whole KV cache, it can never grow.
        NANOVLLM_WARN("request ", self->seq_id, " stopped at ", self->num_tokens(),
                      " tokens: the KV cache cannot hold more");
        finish(std::move(self), FinishReason::kLength);
      } else {
        preempt(std::move(self));
        preempted = true;
      }
      break;  // i was the last running sequence
    }
    blocks_.append_slots(s, 1);
    out.seqs.push_back({&s, 1, true});
    --budget;
    ++i;
  }

  // 2. The short lane (see scheduler.h): while a long prefill is pending, short ones go first, whole,
  //    within half of what is left, running ones and then waiting ones in arrival order, skipping the rest.
  std::vector<const Sequence*> in_lane;
  const int64_t short_max = short_prefill_tokens();
  if (config_.scheduler.enable_chunked_prefill && budget > 1 && long_prefill_pending(short_max)) {
    int64_t lane = budget / 2;
    for (auto& p : running_) {
      Sequence& s = *p;
      const int64_t remaining = s.num_tokens() - s.num_computed_tokens;
      if (remaining <= 1 || remaining > std::min(short_max, lane)) continue;  // a decode, or too long
      out.seqs.push_back({&s, remaining, true});
      in_lane.push_back(&s);
      lane -= remaining;
      budget -= remaining;
    }
    for (auto it = waiting_.begin(); !preempted && lane > 0 && it != waiting_.end() &&
                                     static_cast<int64_t>(running_.size()) < config_.scheduler.max_num_seqs;) {
      Sequence& s = **it;
      if (s.num_tokens() > short_max || !blocks_.can_allocate(s) ||
          s.num_tokens() - blocks_.num_prefix_hit_tokens(s) > lane) {
        ++it;
        continue;
      }
      const int64_t n = admit(s);
      out.seqs.push_back({&s, n, true});
      in_lane.push_back(&s);
      lane -= n;
      budget -= n;
      running_.push_back(std::move(*it));
      it = waiting_.erase(it);
    }
  }

  // 3. Running sequences still in prefill (chunked): blocks were allocated at admission.
  for (auto& p : running_) {
    if (budget == 0) break;
    Sequence& s = *p;
    const int64_t remaining = s.num_tokens() - s.num_computed_tokens;
    if (remaining <= 1) continue;  // a decode (scheduled above or skipped for budget)
    if (std::find(in_lane.begin(), in_lane.end(), &s) != in_lane.end()) continue;
    const int64_t n = std::min(remaining, budget);
    blocks_.append_slots(s, n);  // no-op: admission covered all tokens
    out.seqs.push_back({&s, n, n == remaining});
    budget -= n;
  }

  // 4. Admit waiting sequences, first come first served: stop at the first one that does not fit.
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < config_.scheduler.max_num_seqs) {
    Sequence& s = *waiting_.front();
    if (!blocks_.can_allocate(s)) break;
    if (!config_.scheduler.enable_chunked_prefill && s.num_tokens() - blocks_.num_prefix_hit_tokens(s) > budget)
      break;
    const int64_t remaining = admit(s);
    const int64_t n = std::min(remaining, budget);
    out.seqs.push_back({&s, n, n == remaining});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  return out;  // decodes first, then prefill chunks, by construction
}

int64_t Scheduler::admit(Sequence& s) {
  const int64_t remaining = s.num_tokens() - blocks_.num_prefix_hit_tokens(s);
  blocks_.allocate(s);
  NANOVLLM_ASSERT(s.num_tokens() - s.num_computed_tokens == remaining);
  s.own_tokens();  // from here on the runner reads (and the sampler appends to) token_ids
  s.status = SequenceStatus::kRunning;
  return remaining;
}

int64_t Scheduler::short_prefill_tokens() const { return config_.scheduler.max_num_batched_tokens / 4; }

bool Scheduler::long_prefill_pending(int64_t short_max) const {
  for (const auto& p : running_)
    if (p->num_tokens() - p->num_computed_tokens > short_max) return true;
  for (const auto& p : waiting_)
    if (p->num_tokens() > short_max) return true;
  return false;
}

FinishReason Scheduler::stop_reason(const Sequence& s) const {
  const SamplingParams& p = s.params;
  const int64_t num_out = s.num_output_tokens();
  // A complete constrained answer ends the request whatever else holds: no token may follow it.
  if (s.constraint && s.constraint->is_complete()) return FinishReason::kStop;
  if (num_out < p.min_tokens) return FinishReason::kNone;
  // vLLM v1 order: length limits first, then eos, then stop ids.
  if (num_out >= p.max_tokens || s.num_tokens() >= config_.model.max_model_len) return FinishReason::kLength;
  const int64_t last = s.last_token();
  if (!p.ignore_eos && std::find(eos_token_ids_.begin(), eos_token_ids_.end(), last) != eos_token_ids_.end())
    return FinishReason::kStop;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end())
    return FinishReason::kStop;
  return FinishReason::kNone;
}

void Scheduler::update(const SchedulerOutput& out, const std::vector<SampledToken>& sampled) {
  advance(out);
  resolve(out, sampled);
}

void Scheduler::advance(const SchedulerOutput& out) {
  for (const ScheduledSequence& ss : out.seqs) {
    Sequence& s = *ss.seq;
    s.num_computed_tokens += ss.num_new_tokens;
    NANOVLLM_ASSERT(s.num_computed_tokens <= s.num_tokens());
    blocks_.commit_full_blocks(s);  // blocks of computed positions only: the placeholder is not among them
    if (ss.sample) s.token_ids.push_back(kPendingToken);
  }
}

void Scheduler::resolve(const SchedulerOutput& out, const std::vector<SampledToken>& sampled) {
  size_t k = 0;
  std::vector<Sequence*> done, refused;
  for (const ScheduledSequence& ss : out.seqs) {
    if (!ss.sample) continue;
    Sequence& s = *ss.seq;
    NANOVLLM_CHECK(k < sampled.size(), "Scheduler::update: ", sampled.size(),
                   " sampled tokens for more sequences with sample == true");
    const SampledToken& t = sampled[k++];
    NANOVLLM_CHECK(t.seq_id == s.seq_id, "Scheduler::update: sampled token for request ", t.seq_id,
                   " where request ", s.seq_id, " was expected");
    NANOVLLM_ASSERT(s.token_ids.back() == kPendingToken);
    if (s.num_output_tokens() == 1) s.first_token_time = std::chrono::steady_clock::now();
    s.token_ids.back() = t.token_id;
    s.extend_block_hashes();  // the token may fill a block
    if (s.params.logprobs > 0) s.logprobs.push_back(t.top_logprobs);
    if (s.constraint && !s.constraint->accept(t.token_id)) {
      NANOVLLM_WARN("request ", s.seq_id, ": token ", t.token_id, " breaks its structured-output constraint; aborted");
      refused.push_back(&s);
      continue;
    }
    if (stop_reason(s) != FinishReason::kNone) done.push_back(&s);
  }
  NANOVLLM_CHECK(k == sampled.size(), "Scheduler::update: ", sampled.size(), " sampled tokens for ", k,
                 " sequences with sample == true");
  for (Sequence* d : done) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == d; });
    NANOVLLM_ASSERT(it != running_.end());
    std::unique_ptr<Sequence> seq = std::move(*it);
    running_.erase(it);
    const FinishReason r = stop_reason(*seq);
    finish(std::move(seq), r);
  }
  for (Sequence* d : refused) abort(d->seq_id);
}

bool Scheduler::can_schedule_ahead(const SchedulerOutput& out) const {
  if (!waiting_.empty() || out.seqs.size() != running_.size()) return false;
  int64_t new_blocks = 0;
  bool all_reach_max_tokens = true;  // then step N + 1 would be wholly wasted: do not launch it
  for (const ScheduledSequence& ss : out.seqs) {
    const Sequence& s = *ss.seq;
    if (ss.num_new_tokens != 1 || !ss.sample || s.status != SequenceStatus::kRunning) return false;
    const SamplingParams& p = s.params;
    if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) return false;
    if (s.constraint) return false;  // its next mask depends on the token step N samples
    // After step N the sequence holds num_tokens() + 1 tokens, all but the last computed; step N + 1
    // computes that last one: it must stay below max_model_len.
    if (s.num_tokens() + 1 >= config_.model.max_model_len) return false;
    new_blocks += blocks_.blocks_for(s.num_tokens() + 1) - static_cast<int64_t>(s.block_table.size());
    all_reach_max_tokens = all_reach_max_tokens && s.num_output_tokens() + 1 >= p.max_tokens;
  }
  return !all_reach_max_tokens && new_blocks <= blocks_.num_free_blocks();
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_finished() {
  std::vector<std::unique_ptr<Sequence>> r;
  r.swap(finished_);
  return r;
}

bool Scheduler::abort(int64_t seq_id) {
  auto match = [&](const auto& p) { return p->seq_id == seq_id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    std::unique_ptr<Sequence> seq = std::move(*it);
    running_.erase(it);
    finish(std::move(seq), FinishReason::kAbort);
    return true;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
    std::unique_ptr<Sequence> seq = std::move(*it);
    waiting_.erase(it);
    finish(std::move(seq), FinishReason::kAbort);
    return true;
  }
  return false;
}

}  // namespace nanovllm
