// ForwardBatch packing: what the model sees for a step, and the padded decode layout CUDA graphs replay.
#include <gtest/gtest.h>

#include "nanovllm/runner/forward_batch.h"

namespace nanovllm {
namespace {

Sequence make_seq(int64_t id, int n_tokens, int computed, std::vector<int32_t> blocks) {
  Sequence s;
  s.seq_id = id;
  for (int i = 0; i < n_tokens; ++i) s.token_ids.push_back(100 * static_cast<int32_t>(id) + i);
  s.num_prompt_tokens = n_tokens;
  s.num_computed_tokens = computed;
  s.block_table = std::move(blocks);
  return s;
}

std::vector<int32_t> view_ints(const TensorView& v) {
  const int32_t* p = v.data_as<int32_t>();
  return std::vector<int32_t>(p, p + v.numel());
}

TEST(ForwardBatch, MixedPrefillChunkAndDecode) {
  // seq 0: decode of its 10th token (9 cached); seq 1: chunk of tokens 4..8 with 4 cached (prefix hit).
  Sequence a = make_seq(0, 10, 9, {7, 3, 5});
  Sequence b = make_seq(1, 12, 4, {2, 8, 6});
  SchedulerOutput out;
  out.seqs = {{&a, 1, true}, {&b, 5, false}};
  const ForwardBatch fb = build_forward_batch(out, /*block_size=*/4);
  ForwardBatch copy = fb;
  const DecoderInputs in = copy.views(copy.data.data(), Device::cpu());
  EXPECT_EQ(view_ints(in.input_ids), (std::vector<int32_t>{9, 104, 105, 106, 107, 108}));
  EXPECT_EQ(view_ints(in.positions), (std::vector<int32_t>{9, 4, 5, 6, 7, 8}));
  // slot = block_table[pos / 4] * 4 + pos % 4
  EXPECT_EQ(view_ints(in.attn.slot_mapping), (std::vector<int32_t>{5 * 4 + 1, 8 * 4 + 0, 8 * 4 + 1, 8 * 4 + 2,
                                                                   8 * 4 + 3, 6 * 4 + 0}));
  EXPECT_EQ(view_ints(in.attn.cu_seqlens_q), (std::vector<int32_t>{0, 1, 6}));
  EXPECT_EQ(view_ints(in.attn.context_lens), (std::vector<int32_t>{10, 9}));
  EXPECT_EQ(view_ints(in.sample_rows), (std::vector<int32_t>{0}));  // only the decode samples
  EXPECT_EQ(view_ints(in.attn.block_tables), (std::vector<int32_t>{7, 3, 5, 2, 8, 6}));
  EXPECT_EQ(in.attn.max_query_len, 5);
  EXPECT_EQ(in.attn.max_context_len, 10);
  EXPECT_EQ(in.attn.num_leading_decodes, 1);
  // Per sequence on its own (sparse prefill splits a step): {0, its query length}, and the host views.
  EXPECT_EQ(view_ints(in.attn.seq_cu_seqlens_q), (std::vector<int32_t>{0, 1, 0, 5}));
  EXPECT_EQ(in.attn.seq_cu_seqlens_q.shape(), (Shape{2, 2}));
  EXPECT_EQ(in.attn.host_cu_seqlens_q, in.attn.cu_seqlens_q.data_as<int32_t>());
  EXPECT_EQ(in.attn.host_context_lens, in.attn.context_lens.data_as<int32_t>());
  // A device copy's views take the host arrays given beside it (the CUDA runner's eager steps).
  const DecoderInputs dev = fb.views(copy.data.data(), Device::cuda(0), fb.data.data());
  EXPECT_EQ(std::vector<int32_t>(dev.attn.host_cu_seqlens_q, dev.attn.host_cu_seqlens_q + 3),
            (std::vector<int32_t>{0, 1, 6}));
  EXPECT_EQ(std::vector<int32_t>(dev.attn.host_context_lens, dev.attn.host_context_lens + 2),
            (std::vector<int32_t>{10, 9}));
  EXPECT_EQ(fb.views(copy.data.data(), Device::cuda(0)).attn.host_cu_seqlens_q, nullptr);
}

TEST(ForwardBatch, LeadingDecodesStopAtTheFirstLongerQuery) {
  // decode, decode, prefill chunk, decode: only the first two lead (the CUDA decode kernel takes them).
  Sequence a = make_seq(0, 10, 9, {7, 3, 5});
  Sequence b = make_seq(1, 5, 4, {1, 4});
  Sequence c = make_seq(2, 8, 0, {2, 8});
  Sequence d = make_seq(3, 3, 2, {6});
  SchedulerOutput out;
  out.seqs = {{&a, 1, true}, {&b, 1, true}, {&c, 8, true}, {&d, 1, true}};
  ForwardBatch fb = build_forward_batch(out, /*block_size=*/4);
  EXPECT_EQ(fb.views(fb.data.data(), Device::cpu()).attn.num_leading_decodes, 2);
  out.seqs = {{&c, 8, true}, {&a, 1, true}};  // a prefill first: none lead
  fb = build_forward_batch(out, 4);
  EXPECT_EQ(fb.views(fb.data.data(), Device::cpu()).attn.num_leading_decodes, 0);
  out.seqs = {{&a, 1, true}, {&d, 1, true}};
  fb = build_forward_batch(out, 4);
  EXPECT_EQ(fb.views(fb.data.data(), Device::cpu()).attn.num_leading_decodes, 2);
}

TEST(ForwardBatch, PaddedDecodeHasFixedLayoutAndHarmlessPadding) {
  Sequence a = make_seq(0, 6, 5, {4, 1});
  Sequence b = make_seq(1, 3, 2, {9});
  SchedulerOutput out;
  out.seqs = {{&a, 1, true}, {&b, 1, true}};
  ForwardBatch fb = build_padded_decode_batch(out, 4, /*padded_seqs=*/4, /*table_stride=*/5, /*max_context_len=*/20);
  const DecoderInputs in = fb.views(fb.data.data(), Device::cpu());
  EXPECT_EQ(in.attn.num_seqs, 4);
  EXPECT_EQ(in.attn.num_tokens, 4);
  EXPECT_EQ(in.attn.max_context_len, 20);
  EXPECT_EQ(in.attn.num_leading_decodes, 4);
  EXPECT_FALSE(in.attn.seq_cu_seqlens_q.defined());  // no policy splits a decode step: the graphs' inputs stay small
  EXPECT_EQ(view_ints(in.input_ids), (std::vector<int32_t>{5, 102, 0, 0}));
  EXPECT_EQ(view_ints(in.attn.slot_mapping), (std::vector<int32_t>{1 * 4 + 1, 9 * 4 + 2, -1, -1}));
  EXPECT_EQ(view_ints(in.attn.cu_seqlens_q), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(view_ints(in.attn.context_lens), (std::vector<int32_t>{6, 3, 1, 1}));
  EXPECT_EQ(view_ints(in.sample_rows), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(view_ints(in.attn.block_tables),
            (std::vector<int32_t>{4, 1, -1, -1, -1, 9, -1, -1, -1, -1, 0, -1, -1, -1, -1, 0, -1, -1, -1, -1}));
  // The same bucket with other sequences lays out identically (a graph's pointers stay valid).
  Sequence c = make_seq(2, 17, 16, {3, 2, 1, 0, 8});
  SchedulerOutput out2;
  out2.seqs = {{&c, 1, true}};
  const ForwardBatch fb2 = build_padded_decode_batch(out2, 4, 4, 5, 20);
  EXPECT_EQ(fb2.data.size(), fb.data.size());
  EXPECT_EQ(fb2.block_tables, fb.block_tables);
  EXPECT_EQ(fb2.sample_rows, fb.sample_rows);
}

TEST(ForwardBatch, DualChunkScaleLengths) {
  // The length whose Dual Chunk Attention factor a token carries: the prompt's for prompt tokens (every chunk
  // of it), position + 1 for generated ones, also when a preempted sequence recomputes them.
  Sequence decode = make_seq(0, 9, 8, {7, 3, 5});
  decode.num_prompt_tokens = 6;  // tokens 6, 7, 8 were generated
  Sequence chunk = make_seq(1, 12, 4, {2, 8, 6});  // a middle chunk (4..8) of a 12-token prompt
  Sequence recompute = make_seq(2, 7, 0, {1, 4});
  recompute.num_prompt_tokens = 5;  // preempted after generating tokens 5 and 6
  SchedulerOutput out;
  out.seqs = {{&decode, 1, true}, {&chunk, 5, false}, {&recompute, 7, true}};
  ForwardBatch fb = build_forward_batch(out, /*block_size=*/4);
  EXPECT_EQ(view_ints(fb.views(fb.data.data(), Device::cpu()).attn.dca_scale_lens),
            (std::vector<int32_t>{9, 12, 12, 12, 12, 12, 5, 5, 5, 5, 5, 6, 7}));

  SchedulerOutput dec;
  dec.seqs = {{&decode, 1, true}};
  fb = build_padded_decode_batch(dec, 4, /*padded_seqs=*/3, /*table_stride=*/4, /*max_context_len=*/16);
  EXPECT_EQ(view_ints(fb.views(fb.data.data(), Device::cpu()).attn.dca_scale_lens), (std::vector<int32_t>{9, 1, 1}));
}

}  // namespace
}  // namespace nanovllm
