#include "nanovllm/runner/cuda/persistent_decode_model.h"

namespace nanovllm {

cuda_ops::PersistentDecodeModel persistent_decode_model(const Qwen3Model& model, const std::vector<LayerKvCache>& kv) {
  const ModelConfig& c = model.config();
  NANOVLLM_CHECK(static_cast<int64_t>(kv.size()) == c.num_hidden_layers, "persistent decode: ", kv.size(),
                 " KV caches for ", c.num_hidden_layers, " layers");
  cuda_ops::PersistentDecodeModel m;
  m.hidden = c.hidden_size;
  m.heads = c.num_attention_heads;
  m.kv_heads = c.num_key_value_heads;
  m.head_dim = c.head_dim;
  m.intermediate = c.intermediate_size;
  m.rms_norm_eps = static_cast<float>(c.rms_norm_eps);
  m.attn_scale = model.attention_scale();
  m.rope_inv_freq = model.rope().inv_freq;
  m.rope_attention_scaling = model.rope().attention_scaling;
  for (size_t l = 0; l < kv.size(); ++l) {
    const LayerWeights& w = model.weights().layers[l];
    m.layers.push_back({w.input_layernorm, w.qkv_proj, w.qkv_bias, w.q_norm, w.k_norm, w.o_proj, w.o_bias,
                        w.post_attention_layernorm, w.gate_up_proj, w.down_proj, kv[l].k, kv[l].v});
  }
  return m;
}

}  // namespace nanovllm
