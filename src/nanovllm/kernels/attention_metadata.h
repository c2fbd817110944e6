// Attention metadata for one forward step over a batch of sequences (prefill chunks and decodes mixed).
// Travels explicitly (no global context). All views live on the device that runs the step.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"

namespace nanovllm {

struct AttentionMetadata {
  int64_t num_seqs = 0;
  int64_t num_tokens = 0;        // sum of query lengths
  int64_t max_query_len = 0;     // host-side maxima (launch sizing on CUDA)
  int64_t max_context_len = 0;
  TensorView cu_seqlens_q;       // [num_seqs + 1] i32: query tokens of seq s are rows [cu[s], cu[s+1])
  TensorView context_lens;       // [num_seqs] i32: KV length of seq s after this step's tokens are stored
  TensorView block_tables;       // [num_seqs, max_blocks_per_seq] i32: physical block ids, -1 padded
  TensorView slot_mapping;       // [num_tokens] i32: block * block_size + offset where token's K/V go; -1 skip
  int64_t block_size = 0;
  // Leading sequences whose query is one token (a mixed step puts its decodes first). The CUDA backend
  // runs them through the decode kernel, which reads each KV head once per GQA group with split-KV, and
  // only the rest through the prefill kernel. 0 is always valid (everything takes the prefill path).
  int64_t num_leading_decodes = 0;
  // CUDA decode: split the keys only as far as every CTA of the launch is resident at once. For batches of
  // short, even contexts (sparse decode's virtual batch of S x Hk items of <= budget keys), where a second,
  // partial wave of short CTAs costs as much as the first (H200, 64 items x 2048 keys: 2.2 waves at 42 us, one at 39 us).
  bool decode_single_wave = false;
  // For a policy that attends a step's sequences one at a time (sparse prefill: a pattern per prefill chunk), where
  // the runner has them (ForwardBatch::views; unset elsewhere, e.g. the offload runner's one-sequence chunks):
  // cu_seqlens_q and context_lens as host memory (the same arrays on the CPU backend, the packed inputs before their
  // upload on CUDA), and seq_cu_seqlens_q [num_seqs, 2] i32 on the step's device, row s = {0, query length of seq s}:
  // the cu_seqlens_q of sequence s attended on its own.
  const int32_t* host_cu_seqlens_q = nullptr;  // [num_seqs + 1]
  const int32_t* host_context_lens = nullptr;  // [num_seqs]
  TensorView seq_cu_seqlens_q;
  // Dual Chunk Attention's length scaling (kernels/dual_chunk_ops.h): [num_tokens] i32, the sequence length
  // whose factor token t's query and key carry: its prompt's length for a prompt token, position + 1 for a
  // generated one (vLLM scales prefill by the whole prompt's length, a decode step by the length so far).
  // Read only by the DCA ops of a model whose DCA scales logits; may be undefined otherwise.
  TensorView dca_scale_lens;
};

}  // namespace nanovllm
