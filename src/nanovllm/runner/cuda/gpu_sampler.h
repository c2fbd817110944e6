// GpuSampler: the CPU Sampler's contract (engine/sampler.h) on device logits. Per step: the rows'
// parameters and suppression / logit_bias / penalty lists are packed into one pinned buffer and reach the device in one
// transfer (an H2D copy, or the caller's staging kernel); rows with a structured-output constraint get their
// token bitmask computed on the host (fill_masks(), while the step's forward pass runs), copied and applied
// to their logits (kernels/cuda/token_bitmask.h); one kernel samples every row
// (kernels/cuda/sampling.h) and writes the token ids (plus top-K logprobs when some row asks for them)
// straight into pinned host memory: a few bytes per sequence instead of [S, V] logits, and no D2H copy.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/engine/sequence.h"
#include "nanovllm/kernels/cuda/sampling.h"

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
  // enqueue() in two parts, so a caller can stage the inputs with its own: pack() fills the slot's pinned
  // inputs (host work only) and returns the words that must be on the device before the kernels;
  // enqueue_packed() queues them, with an H2D copy of those words first unless `staged` (the caller
  // queued their copy on `stream` after the previous sampling and before this call).
  cuda_ops::StagedWords pack(int slot, const std::vector<const Sequence*>& seqs);
  // The token bitmasks of the packed rows whose sequence has a constraint (host work: call it after the
  // step's forward pass is queued, so it overlaps the device). enqueue_packed() calls it if the caller did
  // not. The sequences' constraints must have seen every earlier token (never a step fed on the device).
  void fill_masks(int slot);
  void enqueue_packed(int slot, float* logits, cudaStream_t stream, bool staged);
  std::vector<SampledToken> collect(int slot);
  // [rows] i32 in device memory: the tokens of the last enqueued sampling (a copy of what collect()
  // returns), valid in stream order after it until its slot's next enqueue().
  const int32_t* device_token_ids() const { return last_token_ids_; }

  int64_t vocab() const { return vocab_; }

 private:
  void reserve(int64_t rows, int64_t entries);
  struct Slot {
    Buffer in_host;   // pinned: [rows] GpuSamplingParams, then the entries (staging of in_dev_)
    Buffer out_host;  // pinned, written by the kernels: [sample_output_words(rows)] (cuda_ops::GpuSampleOutputs)
    Buffer ids_dev;   // [rows] i32 device: the kernels' copy of the token ids (device_token_ids())
    void* in_mapped = nullptr;   // the kernels' addresses of in_host / out_host
    void* out_mapped = nullptr;
    cudaEvent_t done = nullptr;  // after the sampling kernels
    std::vector<std::pair<int64_t, int64_t>> rows;  // (seq_id, logprobs K) per row, from pack()
    int64_t entries = 0;                            // penalty entries packed after the rows' params
    bool packed = false;                            // pack() done, enqueue_packed() not yet
    bool pending = false;                           // enqueued, not yet collected
    // Structured outputs: (row, sequence) of the packed rows with a constraint; fill_masks() writes the
    // masks that apply this step into mask_host: [cap_mask_rows, words] u32, then [cap_mask_rows] i32 rows.
    std::vector<std::pair<int32_t, const Sequence*>> constrained;
    Buffer mask_host;
    int64_t num_masks = 0;
    bool masks_filled = false;
  };

  std::vector<int64_t> eos_token_ids_;
  int64_t vocab_ = 0;
  int device_ = 0;
  int64_t cap_rows_ = 0, cap_entries_ = 0;
  Buffer in_dev_;   // [cap_rows] GpuSamplingParams, then [cap_entries] GpuPenaltyEntry (steps with entries)
  std::array<Slot, 2> slots_;
  Slot& slot_at(int slot_index);  // checks the index
  const int32_t* last_token_ids_ = nullptr;  // device_token_ids()
  Buffer stats_dev_;           // [sample_scratch_bytes(cap_rows, vocab)]: the chunk pass's scratch
  // Token bitmasks, allocated on the first step with a constraint: the device copy of a slot's mask_host.
  int64_t mask_words_ = 0;     // (vocab + 31) / 32
  int64_t cap_mask_rows_ = 0;
  Buffer mask_dev_;
  void reserve_masks(int64_t rows);
  struct EntryScratch {
    int32_t count = 0;  // GpuPenaltyEntry::count
    float bias = 0.0f;
  };
  std::unordered_map<int32_t, EntryScratch> scratch_;  // id -> its entry, reused per row
};

}  // namespace nanovllm
