// ForwardBatch: the step's model inputs packed into one int32 host array so the CUDA backend moves them
// with a single host->device copy; views() turns a copy of it (host or device) into DecoderInputs.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/model/decoder.h"

namespace nanovllm {

struct ForwardBatch {
  std::vector<int32_t> data;  // the packed arrays below, back to back
  int64_t num_tokens = 0;     // T
  int64_t num_seqs = 0;       // S (scheduled sequences)
  int64_t num_sampled = 0;    // sequences that sample a token this step
  int64_t max_blocks_per_seq = 0;
  int64_t max_query_len = 0;
  int64_t max_context_len = 0;
  int64_t num_leading_decodes = 0;  // AttentionMetadata::num_leading_decodes
  int64_t block_size = 0;
  // Offsets (in int32 elements) into data:
  int64_t input_ids = 0;      // [T]
  int64_t positions = 0;      // [T]
  int64_t slot_mapping = 0;   // [T]
  int64_t cu_seqlens_q = 0;   // [S + 1]
  int64_t context_lens = 0;   // [S]
  int64_t sample_rows = 0;    // [num_sampled]
  int64_t block_tables = 0;   // [S, max_blocks_per_seq], -1 padded
  int64_t dca_scale_lens = 0;  // [T]: AttentionMetadata::dca_scale_lens (prompt length, or position + 1 past it)
  // [S, 2]: {0, query length of seq s} (AttentionMetadata::seq_cu_seqlens_q); -1: not packed (padded decode
  // batches: no policy splits a decode step, and the graphs' inputs stay as small as they were).
  int64_t seq_cu_seqlens_q = -1;

  // Views of the packed arrays at `base` (data.data() itself, or a device copy of it). `host`: the packed arrays in
  // host memory (data.data()) for the metadata's host views; on the CPU `base` is that already.
  DecoderInputs views(void* base, Device device, const int32_t* host = nullptr) const;
};

ForwardBatch build_forward_batch(const SchedulerOutput& out, int64_t block_size);

// A decode-only batch (every sequence one new token, sampling) padded to `padded_seqs` sequences with
// block tables of a fixed `table_stride`, so its layout depends only on (padded_seqs, table_stride):
// what a CUDA graph captured for that batch size reads. Padding rows store no K/V (slot -1), attend one
// position of block `pad_block` and are sampled into logits rows nobody reads. max_context_len is set
// to `max_context_len` (the graph's launch sizing must hold for every context it will replay).
ForwardBatch build_padded_decode_batch(const SchedulerOutput& out, int64_t block_size, int64_t padded_seqs,
                                       int64_t table_stride, int64_t max_context_len, int32_t pad_block = 0);

}  // namespace nanovllm
