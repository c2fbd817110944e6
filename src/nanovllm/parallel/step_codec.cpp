#include "nanovllm/parallel/step_codec.h"

#include <algorithm>
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/parallel/wire.h"

namespace nanovllm {
namespace {

// A field added to SamplingParams must be added to put_params / get_params too (this trips first).
// structured_outputs is not sent: only rank 0 samples, and only the sampler reads it (Sequence::constraint).
static_assert(sizeof(SamplingParams) - sizeof(std::optional<StructuredOutputsParams>) == 160,
              "SamplingParams changed: update step_codec.cpp's put/get_params");

void put_params(ByteWriter& w, const SamplingParams& p) {
  w.put(p.temperature);
  w.put(p.top_k);
  w.put(p.top_p);
  w.put(p.min_p);
  w.put(p.repetition_penalty);
  w.put(p.presence_penalty);
  w.put(p.frequency_penalty);
  w.put<uint8_t>(p.seed.has_value());
  w.put<uint64_t>(p.seed.value_or(0));
  w.put(p.max_tokens);
  w.put(p.min_tokens);
  w.put<uint8_t>(p.ignore_eos);
  w.put_vector(p.stop_token_ids);
  w.put(p.logprobs);
  w.put<uint64_t>(p.logit_bias.size());
  for (const auto& [id, bias] : p.logit_bias) {
    w.put(id);
    w.put(bias);
  }
}

SamplingParams get_params(ByteReader& r) {
  SamplingParams p;
  p.temperature = r.get<float>();
  p.top_k = r.get<int64_t>();
  p.top_p = r.get<float>();
  p.min_p = r.get<float>();
  p.repetition_penalty = r.get<float>();
  p.presence_penalty = r.get<float>();
  p.frequency_penalty = r.get<float>();
  const bool has_seed = r.get<uint8_t>() != 0;
  const uint64_t seed = r.get<uint64_t>();
  if (has_seed) p.seed = seed;
  p.max_tokens = r.get<int64_t>();
  p.min_tokens = r.get<int64_t>();
  p.ignore_eos = r.get<uint8_t>() != 0;
  p.stop_token_ids = r.get_vector<int64_t>();
  p.logprobs = r.get<int64_t>();
  const uint64_t biases = r.get<uint64_t>();
  for (uint64_t i = 0; i < biases; ++i) {
    const int32_t id = r.get<int32_t>();
    p.logit_bias[id] = r.get<float>();
  }
  return p;
}

bool carries_step(StepOp op) {
  return op == StepOp::kExecute || op == StepOp::kLaunch || op == StepOp::kExecuteOffloaded;
}

// Drops the entries not scheduled in the last kForgetAfterSteps messages (encoder and decoder alike).
template <typename Map>
void forget_idle(Map& map, int64_t messages) {
  std::erase_if(map, [&](const auto& kv) { return messages - kv.second.last_message >= kForgetAfterSteps; });
}

}  // namespace

// Per scheduled sequence: id, num_new_tokens, sample, whole (first time: params, rng key), progress
// counters, then the token ids and block table as {kept prefix length, tail}.
std::string StepEncoder::encode(StepOp op, const SchedulerOutput* out, bool fed_from_previous) {
  NANOVLLM_CHECK(carries_step(op) == (out != nullptr), "StepEncoder: op ", static_cast<int>(op),
                 (out ? " takes no step" : " needs a step"));
  ByteWriter w;
  w.put(op);
  w.put<uint8_t>(fed_from_previous);
  if (!out) return w.take();
  ++messages_;
  w.put<uint64_t>(out->seqs.size());
  for (const ScheduledSequence& s : out->seqs) {
    const Sequence& seq = *s.seq;
    auto [it, whole] = known_.try_emplace(seq.seq_id);
    Known& k = it->second;
    k.last_message = messages_;
    w.put(seq.seq_id);
    w.put(s.num_new_tokens);
    w.put<uint8_t>(s.sample);
    w.put<uint8_t>(whole);
    if (whole) {
      put_params(w, seq.params);
      w.put(seq.rng_state);
    }
    w.put(seq.num_prompt_tokens);
    w.put(seq.num_computed_tokens);
    w.put(seq.num_cached_tokens);
    // Tokens: the workers' final prefix stays; everything after it is sent again (a placeholder
    // kPendingToken becomes the real id later, or is dropped when a step fails).
    const int64_t keep = std::min(k.final_tokens, seq.num_tokens());
    w.put(keep);
    w.put_vector(seq.token_ids.data() + keep, static_cast<size_t>(seq.num_tokens() - keep));
    const auto pending = std::find(seq.token_ids.begin() + keep, seq.token_ids.end(), kPendingToken);
    k.final_tokens = pending - seq.token_ids.begin();
    // Block table: the common prefix stays (tables grow at the back; preemption empties them).
    const auto [mine, theirs] = std::mismatch(seq.block_table.begin(), seq.block_table.end(),
                                              k.block_table.begin(), k.block_table.end());
    const int64_t same = mine - seq.block_table.begin();
    w.put(same);
    w.put_vector(seq.block_table.data() + same, seq.block_table.size() - static_cast<size_t>(same));
    k.block_table.resize(static_cast<size_t>(same));  // the copy changes where the message does: at the back
    k.block_table.insert(k.block_table.end(), seq.block_table.begin() + same, seq.block_table.end());
  }
  forget_idle(known_, messages_);
  return w.take();
}

DecodedStep StepDecoder::decode(std::string_view bytes) {
  ByteReader r(bytes, "step message");
  DecodedStep step;
  step.op = r.get<StepOp>();
  NANOVLLM_CHECK(step.op >= StepOp::kExecute && step.op <= StepOp::kShutdown, "step message: unknown op ",
                 static_cast<int>(step.op));
  step.fed_from_previous = r.get<uint8_t>() != 0;
  if (!carries_step(step.op)) {
    r.expect_done();
    return step;
  }
  ++messages_;
  const uint64_t n = r.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t id = r.get<int64_t>();
    ScheduledSequence s;
    s.num_new_tokens = r.get<int64_t>();
    s.sample = r.get<uint8_t>() != 0;
    const bool whole = r.get<uint8_t>() != 0;
    auto it = seqs_.find(id);
    if (whole) {
      if (it == seqs_.end()) it = seqs_.emplace(id, Held{std::make_unique<Sequence>(), 0}).first;
      Sequence& seq = *it->second.seq;
      seq = Sequence{};
      seq.seq_id = id;
      seq.status = SequenceStatus::kRunning;
      seq.params = get_params(r);
      seq.rng_state = r.get<uint64_t>();
    }
    NANOVLLM_CHECK(it != seqs_.end(), "step message: request ", id, " is not known to this worker");
    it->second.last_message = messages_;
    Sequence& seq = *it->second.seq;
    seq.num_prompt_tokens = r.get<int64_t>();
    seq.num_computed_tokens = r.get<int64_t>();
    seq.num_cached_tokens = r.get<int64_t>();
    const int64_t keep = r.get<int64_t>();
    NANOVLLM_CHECK(keep >= 0 && keep <= seq.num_tokens(), "step message: request ", id, " keeps ", keep,
                   " of its ", seq.num_tokens(), " tokens");
    seq.token_ids.resize(static_cast<size_t>(keep));
    const std::vector<int32_t> tokens = r.get_vector<int32_t>();
    seq.token_ids.insert(seq.token_ids.end(), tokens.begin(), tokens.end());
    const int64_t same = r.get<int64_t>();
    NANOVLLM_CHECK(same >= 0 && same <= static_cast<int64_t>(seq.block_table.size()), "step message: request ",
                   id, " keeps ", same, " of its ", seq.block_table.size(), " blocks");
    seq.block_table.resize(static_cast<size_t>(same));
    const std::vector<int32_t> blocks = r.get_vector<int32_t>();
    seq.block_table.insert(seq.block_table.end(), blocks.begin(), blocks.end());
    s.seq = &seq;
    step.out.seqs.push_back(s);
  }
  r.expect_done();
  forget_idle(seqs_, messages_);
  return step;
}

const Sequence* StepDecoder::find(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.seq.get();
}

}  // namespace nanovllm
