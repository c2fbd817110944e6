// GpuSampler: the CPU Sampler's contract (engine/sampler.h) on device logits. Per step: the rows'
// parameters and penalty/suppression lists are packed into one pinned buffer and sent with one H2D copy,
// one kernel samples every row (kernels/cuda/sampling.h), and one D2H copy brings back the token ids
// (plus top-K logprobs when some row asks for them): a few bytes per sequence instead of [S, V] logits.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/engine/sequence.h"

namespace nanovllm {

class GpuSampler {
 public:
  // eos ids are suppressed while min_tokens is not reached (unless a request sets ignore_eos), as in
  // Sampler. Buffers are sized for max_num_seqs rows up front and grow when a step needs more.
  GpuSampler(std::vector<int64_t> eos_token_ids, int64_t vocab, int64_t max_num_seqs, int device = 0);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // logits: [seqs.size(), vocab] f32 on the device, row i for seqs[i], written by earlier work on
  // `stream`. Returns seqs.size() tokens in order, exactly like Sampler::sample (same token choice, same
  // logprob lists). Blocks until the results are on the host; the logits are unchanged afterwards.
  // Does not modify the sequences.
  std::vector<SampledToken> sample(const std::vector<const Sequence*>& seqs, float* logits,
                                   cudaStream_t stream);

  // sample() in two halves, for steps in flight (the runner's launch()): enqueue() queues the sampling
  // of `seqs` on `stream` into host slot `slot` (0 or 1: its pinned staging and results) and returns;
  // collect(slot) waits for it and returns the tokens. A slot is reused only after its collect(). The
  // sequences are read only by enqueue().
  void enqueue(int slot, const std::vector<const Sequence*>& seqs, float* logits, cudaStream_t stream);
  std::vector<SampledToken> collect(int slot);
  // [rows] i32 on the device: the tokens of the last enqueued sampling, until the next one on the stream.
  const int32_t* device_token_ids() const { return static_cast<const int32_t*>(out_dev_.data()); }

  int64_t vocab() const { return vocab_; }

 private:
  void reserve(int64_t rows, int64_t entries);
  struct Slot {
    Buffer in_host;   // pinned staging of in_dev_
    Buffer out_host;  // pinned copy of out_dev_
    cudaEvent_t done = nullptr;  // after the copy to out_host
    std::vector<std::pair<int64_t, int64_t>> rows;  // (seq_id, logprobs K) per row, from enqueue()
    bool pending = false;
  };

  std::vector<int64_t> eos_token_ids_;
  int64_t vocab_ = 0;
  int device_ = 0;
  int64_t cap_rows_ = 0, cap_entries_ = 0;
  Buffer in_dev_;   // [cap_rows] GpuSamplingParams, then [cap_entries] GpuPenaltyEntry
  Buffer out_dev_;  // [sample_output_words(cap_rows)] words (see cuda_ops::GpuSampleOutputs)
  std::array<Slot, 2> slots_;  // host sides of in_dev_ / out_dev_
  Buffer stats_dev_;           // [sample_scratch_bytes(cap_rows, vocab)]: the chunk pass's scratch
  std::unordered_map<int32_t, int32_t> scratch_;  // id -> count, reused per row
};

}  // namespace nanovllm
