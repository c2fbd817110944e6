#include "nanovllm/runner/cuda/gpu_sampler.h"

#include <algorithm>
#include <limits>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/sampling.h"
#include "nanovllm/kernels/cuda/token_bitmask.h"

namespace nanovllm {

namespace {

using cuda_ops::GpuPenaltyEntry;
using cuda_ops::GpuSamplingParams;
using cuda_ops::kMaxSampleLogprobs;

void check_token(int64_t id, int64_t vocab, const Sequence& seq) {
  NANOVLLM_CHECK(id >= 0 && id < vocab, "request ", seq.seq_id, ": token id ", id,
                 " is outside the vocabulary [0, ", vocab, ")");
}

size_t in_bytes(int64_t rows, int64_t entries) {
  return static_cast<size_t>(rows) * sizeof(GpuSamplingParams) + static_cast<size_t>(entries) * sizeof(GpuPenaltyEntry);
}

}  // namespace

GpuSampler::GpuSampler(std::vector<int64_t> eos_token_ids, int64_t vocab, int64_t max_num_seqs, int device)
    : eos_token_ids_(std::move(eos_token_ids)), vocab_(vocab), device_(device), mask_words_((vocab + 31) / 32) {
  NANOVLLM_CHECK(vocab >= 1, "GpuSampler: vocab must be >= 1, got ", vocab);
  for (Slot& slot : slots_) CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
  reserve(std::max<int64_t>(max_num_seqs, 1), 4096);
  // The slots' pinned buffers too, now: a pinned free inside a step may wait for every GPU, and with
  // tensor parallel a peer GPU can be waiting in a collective for this rank (a deadlock).
  for (Slot& slot : slots_) {
    slot.in_host = Buffer(pinned_host_allocator(), in_bytes(cap_rows_, cap_entries_));
    slot.in_mapped = mapped_device_pointer(slot.in_host.data());
    slot.out_host = Buffer(pinned_host_allocator(), cuda_ops::sample_output_words(cap_rows_) * 4);
    slot.out_mapped = mapped_device_pointer(slot.out_host.data());
  }
}

GpuSampler::~GpuSampler() {
  for (Slot& slot : slots_)
    if (slot.done) cudaEventDestroy(slot.done);
}

void GpuSampler::reserve(int64_t rows, int64_t entries) {
  if (rows <= cap_rows_ && entries <= cap_entries_) return;
  // Freeing device memory waits for the device, so buffers a step in flight uses are idle by the time
  // they go. The slots' host buffers follow in enqueue(), each only while its slot is idle.
  if (rows > cap_rows_) {
    cap_rows_ = std::max(rows, cap_rows_ * 2);
    const size_t scratch_bytes = cuda_ops::sample_scratch_bytes(cap_rows_, vocab_);
    stats_dev_ = Buffer(cuda_allocator(device_), scratch_bytes);
    // The chunk pass's counters start at 0. The memset is on the legacy stream, which need not order
    // with the caller's stream: wait for it.
    CUDA_CHECK(cudaMemset(stats_dev_.data(), 0, scratch_bytes));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  cap_entries_ = std::max(entries, std::max<int64_t>(cap_entries_, 4096));
  in_dev_ = Buffer(cuda_allocator(device_), in_bytes(cap_rows_, cap_entries_));
}

std::vector<SampledToken> GpuSampler::sample(const std::vector<const Sequence*>& seqs, float* logits,
                                             cudaStream_t stream) {
  if (seqs.empty()) return {};
  NANOVLLM_CHECK(!slots_[0].pending, "GpuSampler::sample: slot 0 holds a sampling not collected");
  enqueue(0, seqs, logits, stream);
  return collect(0);
}

GpuSampler::Slot& GpuSampler::slot_at(int slot_index) {
  NANOVLLM_CHECK(slot_index == 0 || slot_index == 1, "GpuSampler: slot must be 0 or 1");
  return slots_[static_cast<size_t>(slot_index)];
}

void GpuSampler::enqueue(int slot_index, const std::vector<const Sequence*>& seqs, float* logits,
                         cudaStream_t stream) {
  pack(slot_index, seqs);
  enqueue_packed(slot_index, logits, stream, false);
}

cuda_ops::StagedWords GpuSampler::pack(int slot_index, const std::vector<const Sequence*>& seqs) {
  Slot& slot = slot_at(slot_index);
  NANOVLLM_CHECK(!slot.pending, "GpuSampler::pack: slot ", slot_index, " is still in flight");
  NANOVLLM_CHECK(!seqs.empty(), "GpuSampler::pack: no sequences");
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t V = vocab_;
  slot.rows.clear();

  // Per-row penalty/suppression entries, built on the host only for rows that need them.
  std::vector<GpuSamplingParams> params(static_cast<size_t>(S));
  std::vector<GpuPenaltyEntry> entries;
  for (int64_t i = 0; i < S; ++i) {
    const Sequence& seq = *seqs[i];
    const SamplingParams& p = seq.params;
    NANOVLLM_CHECK(p.logprobs >= 0 && p.logprobs <= kMaxSampleLogprobs, "request ", seq.seq_id,
                   ": logprobs must be in [0, ", kMaxSampleLogprobs, "], got ", p.logprobs);
    const int64_t num_out = seq.num_output_tokens();
    scratch_.clear();
    if (p.repetition_penalty != 1.0f) {  // every seen token (prompt + output)
      for (int32_t id : seq.token_ids) {
        check_token(id, V, seq);
        scratch_.emplace(id, EntryScratch{0, 0.0f});
      }
    }
    if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
      for (int64_t t = seq.num_prompt_tokens; t < seq.num_tokens(); ++t) {
        const int32_t id = seq.token_ids[t];
        check_token(id, V, seq);
        ++scratch_.try_emplace(id, EntryScratch{0, 0.0f}).first->second.count;
      }
    }
    for (const auto& [id, bias] : p.logit_bias) {  // on a seen token's entry, or an entry of its own
      check_token(id, V, seq);
      if (bias != 0.0f) scratch_.try_emplace(id, EntryScratch{cuda_ops::kEntryBiasOnly, 0.0f}).first->second.bias = bias;
    }
    if (num_out < p.min_tokens) {  // suppressed ids win over bias and penalties (-inf stays -inf on the CPU too)
      for (int64_t id : p.stop_token_ids) {
        check_token(id, V, seq);
        scratch_[static_cast<int32_t>(id)].count = cuda_ops::kEntrySuppressed;
      }
      if (!p.ignore_eos)
        for (int64_t id : eos_token_ids_)
          if (id >= 0 && id < V) scratch_[static_cast<int32_t>(id)].count = cuda_ops::kEntrySuppressed;
    }
    GpuSamplingParams& g = params[i];
    g.temperature = p.temperature;
    // top_k >= vocab never filters on the CPU (it needs top_k < number of candidates <= vocab).
    g.top_k = p.top_k > 0 && p.top_k < V ? static_cast<int32_t>(p.top_k) : 0;
    g.top_p = p.top_p;
    g.min_p = p.min_p;
    g.repetition_penalty = p.repetition_penalty;
    g.presence_penalty = p.presence_penalty;
    g.frequency_penalty = p.frequency_penalty;
    g.num_logprobs = static_cast<int32_t>(p.logprobs);
    g.rng_key = seq.rng_state;
    g.step = num_out;
    NANOVLLM_CHECK(entries.size() + scratch_.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()),
                   "GpuSampler: too many penalty entries in one step");
    g.entry_begin = static_cast<int32_t>(entries.size());
    g.entry_count = static_cast<int32_t>(scratch_.size());
    for (const auto& [id, e] : scratch_) entries.push_back({id, e.count, e.bias, 0.0f});
    slot.rows.emplace_back(seq.seq_id, std::min<int64_t>(p.logprobs, V));
  }
  slot.constrained.clear();
  for (int64_t i = 0; i < S; ++i)
    if (seqs[static_cast<size_t>(i)]->constraint) slot.constrained.emplace_back(static_cast<int32_t>(i), seqs[static_cast<size_t>(i)]);
  slot.num_masks = 0;
  slot.masks_filled = slot.constrained.empty();

  const int64_t E = static_cast<int64_t>(entries.size());
  reserve(S, E);
  const size_t in_size = in_bytes(cap_rows_, cap_entries_), out_size = cuda_ops::sample_output_words(cap_rows_) * 4;
  if (slot.in_host.nbytes() < in_size) {
    slot.in_host = Buffer(pinned_host_allocator(), in_size);
    slot.in_mapped = mapped_device_pointer(slot.in_host.data());
  }
  if (slot.out_host.nbytes() < out_size) {
    slot.out_host = Buffer(pinned_host_allocator(), out_size);
    slot.out_mapped = mapped_device_pointer(slot.out_host.data());
  }
  // Freeing the old one waits for the device: a step still staging its fed ids from it has finished.
  if (slot.ids_dev.nbytes() < static_cast<size_t>(cap_rows_) * 4)
    slot.ids_dev = Buffer(cuda_allocator(device_), static_cast<size_t>(cap_rows_) * 4);
  // [S] params, then [E] entries: one transfer.
  auto* host = static_cast<char*>(slot.in_host.data());
  const size_t params_bytes = static_cast<size_t>(S) * sizeof(GpuSamplingParams);
  std::copy_n(reinterpret_cast<const char*>(params.data()), params_bytes, host);
  std::copy_n(reinterpret_cast<const char*>(entries.data()), static_cast<size_t>(E) * sizeof(GpuPenaltyEntry),
              host + params_bytes);
  slot.entries = E;
  slot.packed = true;
  static_assert(sizeof(GpuSamplingParams) % 4 == 0 && sizeof(GpuPenaltyEntry) % 4 == 0, "whole words");
  return {static_cast<int32_t*>(in_dev_.data()), static_cast<const int32_t*>(slot.in_mapped),
          static_cast<int64_t>(in_bytes(S, E) / 4)};
}

void GpuSampler::reserve_masks(int64_t rows) {
  if (rows <= cap_mask_rows_) return;
  cap_mask_rows_ = std::max(rows, cap_rows_);
  const size_t bytes = static_cast<size_t>(cap_mask_rows_) * static_cast<size_t>(mask_words_ + 1) * 4;
  mask_dev_ = Buffer(cuda_allocator(device_), bytes);  // freeing the old one waits for its last use
  for (Slot& slot : slots_)
    if (!slot.pending) slot.mask_host = Buffer(pinned_host_allocator(), bytes);
}

void GpuSampler::fill_masks(int slot_index) {
  Slot& slot = slot_at(slot_index);
  NANOVLLM_CHECK(slot.packed, "GpuSampler::fill_masks: slot ", slot_index, " was not packed");
  if (slot.masks_filled) return;
  const auto n = static_cast<int64_t>(slot.constrained.size());
  reserve_masks(n);
  const size_t bytes = static_cast<size_t>(cap_mask_rows_) * static_cast<size_t>(mask_words_ + 1) * 4;
  if (slot.mask_host.nbytes() < bytes) slot.mask_host = Buffer(pinned_host_allocator(), bytes);
  auto* words = static_cast<uint32_t*>(slot.mask_host.data());  // [cap_mask_rows, mask_words]
  auto* rows = reinterpret_cast<int32_t*>(words + cap_mask_rows_ * mask_words_);  // [cap_mask_rows]
  int64_t m = 0;
  for (const auto& [row, seq] : slot.constrained) {
    if (!seq->constraint->fill_bitmask(words + m * mask_words_, vocab_)) continue;  // no mask this step
    rows[m++] = row;
  }
  slot.num_masks = m;
  slot.masks_filled = true;
}

void GpuSampler::enqueue_packed(int slot_index, float* logits, cudaStream_t stream, bool staged) {
  Slot& slot = slot_at(slot_index);
  NANOVLLM_CHECK(slot.packed, "GpuSampler::enqueue_packed: slot ", slot_index, " was not packed");
  const int64_t S = static_cast<int64_t>(slot.rows.size()), E = slot.entries;
  if (!staged) copy_h2d(in_dev_.data(), slot.in_host.data(), in_bytes(S, E), stream);
  fill_masks(slot_index);
  if (slot.num_masks > 0) {
    // The masks and their rows, in mask_host's layout; then disallowed logits become -inf.
    auto* dev_words = static_cast<uint32_t*>(mask_dev_.data());
    auto* dev_rows = reinterpret_cast<int32_t*>(dev_words + cap_mask_rows_ * mask_words_);
    const auto* host_words = static_cast<const uint32_t*>(slot.mask_host.data());
    copy_h2d(dev_words, host_words, static_cast<size_t>(slot.num_masks * mask_words_) * 4, stream);
    copy_h2d(dev_rows, host_words + cap_mask_rows_ * mask_words_, static_cast<size_t>(slot.num_masks) * 4, stream);
    cuda_ops::apply_token_bitmask(logits, vocab_, vocab_, dev_words, dev_rows, slot.num_masks, stream);
  }
  auto* dev = static_cast<char*>(in_dev_.data());
  const size_t params_bytes = static_cast<size_t>(S) * sizeof(GpuSamplingParams);
  cuda_ops::GpuSampleOutputs out = cuda_ops::sample_outputs_at(slot.out_mapped, S);
  out.device_token_ids = static_cast<int32_t*>(slot.ids_dev.data());
  cuda_ops::sample(logits, S, vocab_, reinterpret_cast<const GpuSamplingParams*>(dev),
                   static_cast<const GpuSamplingParams*>(slot.in_host.data()),
                   E > 0 ? reinterpret_cast<GpuPenaltyEntry*>(dev + params_bytes) : nullptr, out, stream,
                   stats_dev_.data());
  CUDA_CHECK(cudaEventRecord(slot.done, stream));
  last_token_ids_ = out.device_token_ids;
  slot.packed = false;
  slot.pending = true;
}

std::vector<SampledToken> GpuSampler::collect(int slot_index) {
  Slot& slot = slot_at(slot_index);
  NANOVLLM_CHECK(slot.pending, "GpuSampler::collect: nothing enqueued in slot ", slot_index);
  CUDA_CHECK(cudaEventSynchronize(slot.done));
  slot.pending = false;
  const int64_t S = static_cast<int64_t>(slot.rows.size());
  const cuda_ops::GpuSampleOutputs h = cuda_ops::sample_outputs_at(slot.out_host.data(), S);
  std::vector<SampledToken> result(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) {
    const auto [seq_id, k] = slot.rows[static_cast<size_t>(i)];
    SampledToken& r = result[i];
    r.seq_id = seq_id;
    r.token_id = h.token_ids[i];
    if (k > 0) {
      r.top_logprobs.reserve(static_cast<size_t>(k) + 1);
      bool present = false;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t id = h.top_ids[i * kMaxSampleLogprobs + j];
        r.top_logprobs.push_back({id, h.top_logprobs[i * kMaxSampleLogprobs + j]});
        present = present || id == r.token_id;
      }
      if (!present) r.top_logprobs.push_back({r.token_id, h.token_logprobs[i]});
    }
  }
  return result;
}

}  // namespace nanovllm
