// Sane absolute limits on what a model directory may declare, checked where its files are read: a
// corrupt or hostile file gets an error naming the file and the field instead of a huge allocation.
#pragma once

#include <cstdint>

namespace nanovllm {

// Token ids are < 2^24 (the largest real vocabularies hold ~262K ids): tokenizer ids, vocab_size and the
// special ids of config.json / generation_config.json.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

// Experts of one mixture-of-experts layer (Qwen3-MoE has 128; the CUDA routing kernels keep one token's
// router logits in one warp's registers and the per-expert counts in shared memory).
inline constexpr int64_t kMaxExperts = 512;

// Positions are < 2^24 (16.7M tokens, past any model's context): max_position_embeddings and what rope
// scaling extends it to, and the lengths the tools take. Products of such lengths with layer, head and
// hidden sizes (each bounded in model/config.cpp) stay far inside int64.
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;

}  // namespace nanovllm
