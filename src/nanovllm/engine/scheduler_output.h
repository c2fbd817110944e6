// What the scheduler hands the model runner for one step, and what comes back.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/engine/sequence.h"

namespace nanovllm {

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int64_t num_new_tokens = 0;  // query tokens this step: token_ids[num_computed_tokens, +num_new_tokens)
  bool sample = false;         // true when this step reaches the sequence's last token: sample its next one
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> seqs;  // decodes first, then prefill chunks
  int64_t num_tokens() const {
    int64_t n = 0;
    for (const auto& s : seqs) n += s.num_new_tokens;
    return n;
  }
  bool empty() const { return seqs.empty(); }
};

// One sampled token for a ScheduledSequence with sample == true, in SchedulerOutput order.
struct SampledToken {
  int64_t seq_id = 0;
  int32_t token_id = 0;
  std::vector<TokenLogprob> top_logprobs;  // params.logprobs entries, sorted by logprob, descending
};

}  // namespace nanovllm
