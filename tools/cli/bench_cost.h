// Bytes and FLOPs of the Qwen3-family decoder, for the benchmarks' roofline floors (METHOD.md).
#pragma once

#include <cstdint>

#include "nanovllm/model/config.h"

namespace nanovllm::cli {

struct ModelCost {
  double linear_params = 0;         // q/k/v/o + MLP weights over all layers (no embedding, no LM head)
  double lm_head_params = 0;        // V * H
  double weight_bytes_per_step = 0; // bf16 bytes every decode step reads: linears + LM head + norms
  double kv_bytes_per_token = 0;    // K and V of one cached token over all layers (bf16)
  double attn_flops_per_ctx = 0;    // QK^T + PV FLOPs per query token per attended position, all layers

  explicit ModelCost(const ModelConfig& c) {
    const double h = c.hidden_size, i = c.intermediate_size, d = c.head_dim, l = c.num_hidden_layers;
    const double hq = c.num_attention_heads, hk = c.num_key_value_heads;
    linear_params = l * (h * (hq + 2 * hk) * d + hq * d * h + 3 * h * i);
    lm_head_params = static_cast<double>(c.vocab_size) * h;
    weight_bytes_per_step = 2 * (linear_params + lm_head_params) + 2 * l * 2 * h;
    kv_bytes_per_token = l * 2 * hk * d * 2;
    attn_flops_per_ctx = l * hq * 4 * d;
  }
  // FLOPs of `tokens` query tokens through the linears; `sampled` of them also through the LM head.
  double linear_flops(double tokens, double sampled) const {
    return 2 * linear_params * tokens + 2 * lm_head_params * sampled;
  }
  // Causal prefill of n tokens from an empty cache: sum over positions p of (p + 1) attended keys.
  double prefill_attn_flops(double n) const { return attn_flops_per_ctx * n * (n + 1) / 2; }
};

}  // namespace nanovllm::cli
