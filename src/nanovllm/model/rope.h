// RoPE tables from a ModelConfig, reimplementing transformers' modeling_rope_utils.py in fp32 the way
// torch computes it: default, linear, yarn and llama3. The kernels take inv_freq [D/2] and the cos/sin
// multiplier (attention_scaling); angle = float(position) * inv_freq[i].
#pragma once

#include <vector>

#include "nanovllm/model/config.h"

namespace nanovllm {

struct RopeTable {
  std::vector<float> inv_freq;     // [R/2] (R = cfg.rope_dim(), the rotary dimension), scaling folded in
  float attention_scaling = 1.0f;  // YaRN attention factor; 1 otherwise
};

// Throws nanovllm::Error for configurations the formulas cannot handle (odd head_dim, theta <= 1,
// factor <= 0, yarn/llama3 without a usable original_max_position_embeddings, ...).
RopeTable compute_rope(const ModelConfig& cfg);

}  // namespace nanovllm
