// Bytes and FLOPs of the Qwen3-family decoder (dense and mixture-of-experts), for the benchmarks' roofline
// floors (METHOD.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "nanovllm/engine/config.h"
#include "nanovllm/model/config.h"

namespace nanovllm::cli {

// Bytes per projection weight (attention, dense MLP, experts) a CUDA engine streams: 1 where it keeps them
// block-scaled fp8 (an FP8 checkpoint, or --quantization fp8; docs/fp8.md), else 2 (bf16). The block scales
// (4 bytes per 16384 weights) are left out.
inline double projection_weight_bytes(const ModelConfig& mc, const EngineConfig& ec) {
  const bool fp8 = ec.model.quantization == "fp8" || (ec.model.quantization == "auto" && mc.quantization.fp8());
  return fp8 && ec.model.backend == Backend::kCuda ? 1.0 : 2.0;
}

struct ModelCost {
  double weight_params = 0;         // every linear weight (all experts): what the weights occupy, no embedding / LM head
  double active_params = 0;         // the linear weights one token runs through: attention, dense MLPs, router, k experts
  double lm_head_params = 0;        // V * H
  double kv_bytes_per_token = 0;    // K and V of one cached token over all layers (bf16)
  double attn_flops_per_ctx = 0;    // QK^T + PV FLOPs per query token per attended position, all layers

  // projection_bytes: bytes per attention / MLP / expert weight (projection_weight_bytes); routers, LM head and
  // norms stay bf16. ranks: the tensor-parallel size; every count is then one rank's (docs/tensor_parallel.md):
  // q / o, the dense MLPs and every expert split N ways, K / V by KV head (one a rank when N exceeds them), the
  // vocabulary-parallel LM head, the rank's KV heads of the cache; routers and norms whole on every rank.
  explicit ModelCost(const ModelConfig& c, double projection_bytes = 2, int64_t ranks = 1)
      : c_(c), projection_bytes_(projection_bytes) {
    const double n = static_cast<double>(ranks);
    const double h = c.hidden_size, i = c.intermediate_size, d = c.head_dim, l = c.num_hidden_layers;
    const double hq = c.num_attention_heads / n;
    const double hk = static_cast<double>(std::max<int64_t>(c.num_key_value_heads / ranks, 1));
    double moe_layers = 0;
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) moe_layers += c.is_moe_layer(layer) ? 1 : 0;
    const double attention = l * (h * (hq + 2 * hk) * d + hq * d * h);
    const double dense = (l - moe_layers) * 3 * h * i / n;
    expert_params_ = 3 * h * static_cast<double>(c.moe.moe_intermediate_size) / n;
    router_params_ = moe_layers * h * static_cast<double>(c.moe.num_experts);
    moe_layers_ = moe_layers;
    fixed_params_ = attention + dense + router_params_;
    weight_params = fixed_params_ + moe_layers * static_cast<double>(c.moe.num_experts) * expert_params_;
    active_params = fixed_params_ + moe_layers * static_cast<double>(c.moe.num_experts_per_tok) * expert_params_;
    lm_head_params = static_cast<double>(c.vocab_size) * h / n;
    kv_bytes_per_token = l * 2 * hk * d * 2;
    attn_flops_per_ctx = l * hq * 4 * d;
  }

  // Experts a MoE layer reads in a decode step of `batch` tokens: exactly k at batch 1; beyond, the expected
  // number of distinct experts when every token picks k of E uniformly (real routers are skewed: fewer).
  double experts_read(double batch) const {
    const double e = static_cast<double>(c_.moe.num_experts), k = static_cast<double>(c_.moe.num_experts_per_tok);
    if (e == 0) return 0;
    return batch <= 1 ? k : e * (1.0 - std::pow(1.0 - k / e, batch));
  }
  // Bytes a decode step of `batch` sequences reads: attention and dense MLP weights, the experts read
  // (experts_read) at projection_bytes each; the routers, the LM head and the norms in bf16.
  double weight_bytes_per_step(double batch) const {
    const double l = c_.num_hidden_layers, h = c_.hidden_size;
    const double projections = fixed_params_ - router_params_ + moe_layers_ * experts_read(batch) * expert_params_;
    return projection_bytes_ * projections + 2 * (router_params_ + lm_head_params) + 2 * l * 2 * h;
  }
  // FLOPs of `tokens` query tokens through the linears; `sampled` of them also through the LM head.
  double linear_flops(double tokens, double sampled) const {
    return 2 * active_params * tokens + 2 * lm_head_params * sampled;
  }
  // Causal prefill of n tokens from an empty cache: sum over positions p of (p + 1) attended keys.
  double prefill_attn_flops(double n) const { return attn_flops_per_ctx * n * (n + 1) / 2; }

 private:
  ModelConfig c_;
  double projection_bytes_ = 2;
  double expert_params_ = 0;  // one expert's gate, up and down
  double router_params_ = 0;
  double moe_layers_ = 0;
  double fixed_params_ = 0;   // attention + dense MLPs + routers: read every step whatever the batch
};

}  // namespace nanovllm::cli
