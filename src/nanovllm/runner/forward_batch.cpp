#include "nanovllm/runner/forward_batch.h"

#include <algorithm>

namespace nanovllm {

namespace {

// Offsets of the packed arrays for the sizes already set in b; `per_seq_cu`: with seq_cu_seqlens_q.
void lay_out(ForwardBatch& b, bool per_seq_cu) {
  const int64_t t = b.num_tokens, n = b.num_seqs;
  b.input_ids = 0;
  b.positions = b.input_ids + t;
  b.slot_mapping = b.positions + t;
  b.cu_seqlens_q = b.slot_mapping + t;
  b.context_lens = b.cu_seqlens_q + n + 1;
  b.sample_rows = b.context_lens + n;
  b.block_tables = b.sample_rows + b.num_sampled;
  b.dca_scale_lens = b.block_tables + n * b.max_blocks_per_seq;
  const int64_t end = b.dca_scale_lens + t;
  b.seq_cu_seqlens_q = per_seq_cu ? end : -1;
  b.data.assign(static_cast<size_t>(end + (per_seq_cu ? 2 * n : 0)), -1);
}

// Fills the rows of the scheduled sequences (the first out.seqs.size() sequences of b).
void fill(ForwardBatch& b, const SchedulerOutput& out, int64_t block_size) {
  const int64_t n = static_cast<int64_t>(out.seqs.size());
  int32_t* d = b.data.data();
  int64_t row = 0, sampled = 0;
  d[b.cu_seqlens_q] = 0;
  for (int64_t i = 0; i < n; ++i) {
    const ScheduledSequence& s = out.seqs[static_cast<size_t>(i)];
    const Sequence& seq = *s.seq;
    const int64_t start = seq.num_computed_tokens;
    NANOVLLM_ASSERT(start + s.num_new_tokens <= seq.num_tokens());
    NANOVLLM_ASSERT(static_cast<int64_t>(seq.block_table.size()) * block_size >= start + s.num_new_tokens,
                    "seq ", seq.seq_id, " has too few blocks");
    for (int64_t j = 0; j < s.num_new_tokens; ++j, ++row) {
      const int64_t pos = start + j;
      d[b.input_ids + row] = seq.token_ids[static_cast<size_t>(pos)];
      d[b.positions + row] = static_cast<int32_t>(pos);
      d[b.slot_mapping + row] =
          static_cast<int32_t>(seq.block_table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
      // Dual Chunk Attention scales a prompt token by the whole prompt's length (every chunk of a chunked
      // prefill alike, and again when a preempted sequence recomputes) and a generated one by the length so far.
      d[b.dca_scale_lens + row] = static_cast<int32_t>(pos < seq.num_prompt_tokens ? seq.num_prompt_tokens : pos + 1);
    }
    d[b.cu_seqlens_q + i + 1] = static_cast<int32_t>(row);
    if (b.seq_cu_seqlens_q >= 0) {
      d[b.seq_cu_seqlens_q + 2 * i] = 0;
      d[b.seq_cu_seqlens_q + 2 * i + 1] = static_cast<int32_t>(s.num_new_tokens);
    }
    d[b.context_lens + i] = static_cast<int32_t>(start + s.num_new_tokens);
    if (s.sample) d[b.sample_rows + sampled++] = static_cast<int32_t>(row - 1);
    std::copy(seq.block_table.begin(), seq.block_table.end(), d + b.block_tables + i * b.max_blocks_per_seq);
  }
}

}  // namespace

ForwardBatch build_forward_batch(const SchedulerOutput& out, int64_t block_size) {
  ForwardBatch b;
  b.block_size = block_size;
  b.num_seqs = static_cast<int64_t>(out.seqs.size());
  b.num_tokens = out.num_tokens();
  bool leading = true;
  for (const ScheduledSequence& s : out.seqs) {
    const int64_t context = s.seq->num_computed_tokens + s.num_new_tokens;
    leading = leading && s.num_new_tokens == 1;
    b.num_leading_decodes += leading ? 1 : 0;
    b.num_sampled += s.sample ? 1 : 0;
    b.max_query_len = std::max(b.max_query_len, s.num_new_tokens);
    b.max_context_len = std::max(b.max_context_len, context);
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, static_cast<int64_t>(s.seq->block_table.size()));
  }
  lay_out(b, /*per_seq_cu=*/true);
  fill(b, out, block_size);
  return b;
}

ForwardBatch build_padded_decode_batch(const SchedulerOutput& out, int64_t block_size, int64_t padded_seqs,
                                       int64_t table_stride, int64_t max_context_len, int32_t pad_block) {
  const int64_t n = static_cast<int64_t>(out.seqs.size());
  NANOVLLM_ASSERT(n <= padded_seqs);
  ForwardBatch b;
  b.block_size = block_size;
  b.num_seqs = b.num_tokens = b.num_sampled = padded_seqs;
  b.max_query_len = 1;
  b.max_context_len = max_context_len;
  b.num_leading_decodes = padded_seqs;
  b.max_blocks_per_seq = table_stride;
  for (const ScheduledSequence& s : out.seqs) {
    NANOVLLM_ASSERT(s.num_new_tokens == 1 && s.sample, "not a decode step");
    NANOVLLM_ASSERT(static_cast<int64_t>(s.seq->block_table.size()) <= table_stride);
  }
  lay_out(b, /*per_seq_cu=*/false);
  fill(b, out, block_size);
  int32_t* d = b.data.data();
  for (int64_t i = n; i < padded_seqs; ++i) {
    d[b.input_ids + i] = 0;
    d[b.positions + i] = 0;
    d[b.slot_mapping + i] = -1;
    d[b.cu_seqlens_q + i + 1] = static_cast<int32_t>(i + 1);
    d[b.context_lens + i] = 1;
    d[b.sample_rows + i] = static_cast<int32_t>(i);
    d[b.block_tables + i * table_stride] = pad_block;
    d[b.dca_scale_lens + i] = 1;
  }
  return b;
}

DecoderInputs ForwardBatch::views(void* base, Device device, const int32_t* host) const {
  int32_t* p = static_cast<int32_t*>(base);
  auto view = [&](int64_t offset, Shape shape) { return TensorView(p + offset, DType::kI32, shape, device); };
  DecoderInputs in;
  in.input_ids = view(input_ids, {num_tokens});
  in.positions = view(positions, {num_tokens});
  in.sample_rows = view(sample_rows, {num_sampled});
  AttentionMetadata& a = in.attn;
  a.num_seqs = num_seqs;
  a.num_tokens = num_tokens;
  a.max_query_len = max_query_len;
  a.max_context_len = max_context_len;
  a.num_leading_decodes = num_leading_decodes;
  a.block_size = block_size;
  a.cu_seqlens_q = view(cu_seqlens_q, {num_seqs + 1});
  a.context_lens = view(context_lens, {num_seqs});
  a.block_tables = view(block_tables, {num_seqs, max_blocks_per_seq});
  a.slot_mapping = view(slot_mapping, {num_tokens});
  a.dca_scale_lens = view(dca_scale_lens, {num_tokens});
  if (seq_cu_seqlens_q >= 0) a.seq_cu_seqlens_q = view(seq_cu_seqlens_q, {num_seqs, 2});
  if (host == nullptr && device.is_cpu()) host = p;
  if (host != nullptr) {
    a.host_cu_seqlens_q = host + cu_seqlens_q;
    a.host_context_lens = host + context_lens;
  }
  return in;
}

}  // namespace nanovllm
