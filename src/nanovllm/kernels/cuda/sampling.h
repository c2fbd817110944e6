// GPU sampling: one CTA (1024 threads) per row of fp32 logits (after multi-CTA passes over the row when
// given scratch), with the exact semantics of the CPU Sampler (engine/sampler.h), so only a few bytes per
// sequence come back to the host.
//
// Per row: suppression / logit_bias / penalty list -> (greedy) argmax, or temperature -> top-k (count radix select on
// the fp32 bits) -> top-p (radix search on the same bits weighted by fixed-point probability mass, ties
// at the pivot kept in id order) -> min-p -> inverse-CDF draw in id order with
// rng_uniform(rng_key, step) (core/rng.h, evaluated on the device). Raw-logit log-softmax of the
// chosen token and the top-K (K <= 20, ties: lower id first) come back too.
//
// Inputs with NaN or +inf logits are unspecified (as on the CPU).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "nanovllm/kernels/ops.h"

namespace nanovllm::cuda_ops {

constexpr int kMaxSampleLogprobs = 20;

// One per row, packed by the host each step.
struct GpuSamplingParams {
  float temperature;         // < 1e-5: greedy
  int32_t top_k;             // <= 0: off
  float top_p;               // >= 1: off
  float min_p;               // <= 0: off
  float repetition_penalty;  // 1: off
  float presence_penalty;
  float frequency_penalty;
  int32_t num_logprobs;      // top-K raw logprobs to return, 0..20
  uint64_t rng_key;          // Sequence::rng_state
  int64_t step;              // num_output_tokens(): the draw is rng_uniform(rng_key, step)
  int32_t entry_begin;       // this row's entries: entries[entry_begin, entry_begin + entry_count)
  int32_t entry_count;
};

constexpr float kSamplingEps = 1e-5f;  // as the CPU Sampler: below this temperature is greedy

// Temperature sampling without top-k / top-p / min-p and without penalty entries: rows the chunk pass
// draws itself (see sample()).
__host__ __device__ inline bool plain_temperature(const GpuSamplingParams& p) {
  return p.temperature >= kSamplingEps && p.top_k <= 0 && !(p.top_p < 1.0f) && !(p.min_p > 0.0f) &&
         p.entry_count == 0;
}

// A token whose logit is changed before sampling. One per distinct id per row (ids unique in a row).
//   count == kEntrySuppressed: min_tokens not reached (eos / stop id) -> -inf.
//   count == kEntryBiasOnly  : not a seen token; only `bias` applies (logit_bias).
//   count >= 0               : seen token: logit + bias, then the repetition penalty (when != 1; so a row with
//                              repetition_penalty != 1 lists all distinct prompt + output ids), then the
//                              frequency/presence penalties when count (occurrences in the output) > 0.
// `bias` is the request's logit_bias for the id (0: none). `saved` is scratch written by the kernel (the raw
// logit, restored before the kernel ends).
constexpr int32_t kEntrySuppressed = -1;
constexpr int32_t kEntryBiasOnly = -2;
struct GpuPenaltyEntry {
  int32_t id;
  int32_t count;
  float bias;
  float saved;
};

// Results, one contiguous block of 4-byte words for one D2H (the first 2*S words suffice without
// logprobs):
//   [S]      i32  sampled token ids
//   [S]      f32  raw log-softmax of the sampled token
//   [S, 20]  i32  top-K ids (sorted by logprob desc, ties: lower id first; -1 past K)
//   [S, 20]  f32  their raw logprobs
struct GpuSampleOutputs {
  int32_t* token_ids;
  float* token_logprobs;
  int32_t* top_ids;
  float* top_logprobs;
  // Optional [S] copy of token_ids in device memory (null: none). The next step's input staging reads
  // its fed ids from here: an L2 hit instead of a PCIe round trip to the mapped pinned token_ids.
  int32_t* device_token_ids = nullptr;
};
inline size_t sample_output_words(int64_t num_rows) {
  return static_cast<size_t>(num_rows) * (2 + 2 * kMaxSampleLogprobs);
}
// Carves the four arrays out of `base` ([sample_output_words(S)] words, device memory).
GpuSampleOutputs sample_outputs_at(void* base, int64_t num_rows);

// logits: [S, vocab] f32 device, row-major (rows need not be 16-byte aligned). Penalised values are
// written in place while the kernel runs and restored before it ends. params: [S] device;
// host_params: the same [S] on the host, or null (then the one-CTA-per-row kernel always runs);
// entries: [sum of entry_count] device (may be null when no row has entries).
// scratch: [sample_scratch_bytes(S, vocab)] device bytes, zero-filled once before its first use (each
// call leaves it so), or null. With scratch (S <= 65,535, vocab <= 4,194,304), a chunk pass reads every
// row once with one CTA per 4,096 logits: the raw max, argmax and log-sum-exp of every row, and the
// whole draw of rows without penalties that are greedy or plain temperature (plain_temperature). The
// one-CTA-per-row kernel then runs only if some row has filters, penalties or top-K logprobs (as
// host_params shows). Without scratch each row's CTA reads the whole row alone. Token choices agree
// either way up to the fp64 order of the weight sums (a draw within ~1e-16 of a boundary); logprobs to
// the fp32 rounding of the log-sum-exp.
size_t sample_scratch_bytes(int64_t num_rows, int64_t vocab);
void sample(float* logits, int64_t num_rows, int64_t vocab, const GpuSamplingParams* params,
            const GpuSamplingParams* host_params, GpuPenaltyEntry* entries, GpuSampleOutputs out,
            cudaStream_t stream, void* scratch = nullptr);

// A step's input ids fed from the previous step's samples (async scheduling, feed_tokens.cu): where
// ids[i] < 0 it becomes sampled[-1 - ids[i]] (the token the previous step sampled in that row); ids
// >= 0 stay. ids: [n] i32 device; sampled: [previous step's rows] i32 device.
void feed_sampled_tokens(int32_t* ids, int64_t n, const int32_t* sampled, cudaStream_t stream);
// Words to copy from pinned host memory (its mapped address) to the device.
struct StagedWords {
  int32_t* dst = nullptr;
  const int32_t* src_mapped = nullptr;
  int64_t words = 0;
};
// A step's packed inputs staged by a kernel instead of H2D copies (cheaper on the stream for small
// batches: no copy-engine hand-off), with feed_sampled_tokens folded in: dst[i] = src_mapped[i], except
// that a negative word at i in [ids_begin, ids_begin + num_ids) becomes sampled[-1 - word] when sampled
// is not null. dst: [n] i32 device; src_mapped: [n] i32 pinned host memory (its mapped address).
// `extra` (e.g. the sampler's parameters) is copied by the same launch, with PDL where `stream`'s context
// uses it.
void stage_step_inputs(int32_t* dst, const int32_t* src_mapped, int64_t n, int64_t ids_begin, int64_t num_ids,
                       const int32_t* sampled, StagedWords extra, ops::Stream stream);

// For tests: out[i] = x[i] / t as the sampler divides logits by the temperature (x, out: [n] device).
// It must equal the IEEE (CPU) division bit for bit.
void divide_like_sampler(const float* x, int64_t n, float t, float* out, cudaStream_t stream);

}  // namespace nanovllm::cuda_ops
