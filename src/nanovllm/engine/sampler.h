// Sampler: CPU sampling on fp32 logits with vLLM semantics. The reference for any GPU sampler.
//
// Per row, in order: the structured-output mask (Sequence::constraint: disallowed tokens -inf, also for
// logprobs) -> min_tokens suppression (eos ids unless ignore_eos, and stop_token_ids, while fewer
// than min_tokens were generated) -> logit_bias (logit += bias) -> repetition penalty (prompt + output
// tokens; logit > 0 ? / p : * p) -> frequency & presence penalties (output tokens: logit -= f * count + p * [count > 0]) -> temperature
// (< 1e-5: greedy argmax, ties to the lowest id; top-k/top-p/min-p then do nothing) -> top-k (ties at the
// k-th value kept) -> top-p (smallest set of most likely tokens whose mass reaches top_p) -> min-p (keep
// p >= min_p * p_max) -> inverse-CDF draw over the kept tokens in id order with the uniform
// rng_uniform(seq.rng_state, seq.num_output_tokens()) (see rng.h: deterministic per request and step).
//
// Logprobs (params.logprobs = K > 0): log_softmax of the RAW logits (after the structured-output mask,
// before bias, penalties, temperature, vLLM's default), fp64 log-sum-exp; the top K sorted descending (ties: lower id first), followed by the
// sampled token when it is not among them (vLLM returns K or K + 1 entries the same way).
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/engine/sequence.h"

namespace nanovllm {

class Sampler {
 public:
  // eos ids are suppressed while min_tokens is not reached (unless a request sets ignore_eos).
  explicit Sampler(std::vector<int64_t> eos_token_ids = {});

  // logits: [S, vocab] fp32, row i for seqs[i]. Returns S tokens, in order. Does not modify sequences.
  std::vector<SampledToken> sample(const float* logits, int64_t vocab,
                                   const std::vector<const Sequence*>& seqs) const;
  SampledToken sample_row(const float* logits /* [vocab] */, int64_t vocab, const Sequence& seq) const;

 private:
  std::vector<int64_t> eos_token_ids_;
};

// Top-k entries of log_softmax(logits), sorted descending (ties: lower id first). logits: [vocab].
std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int64_t k);
// log_softmax(logits)[id] with an fp64 log-sum-exp.
double token_logprob(const float* logits, int64_t vocab, int64_t id);

}  // namespace nanovllm
