// ModelConfig: what the engine needs from a Hugging Face model directory's config.json and
// generation_config.json, for Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM and
// GLM-4 (transformers' GlmForCausalLM and the original ChatGLMModel / ChatGLMForConditionalGeneration layout).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "nanovllm/core/dtype.h"
#include "nanovllm/model/quantization_config.h"

namespace nanovllm {

// kGlm: transformers' GlmForCausalLM ("glm", the `*-hf` hub repos); kChatGlm: THUDM's original ChatGLM
// layout (`transformer.encoder.layers.N...`, model_type "chatglm"). Both are GLM-4's math.
enum class Architecture { kQwen3, kQwen3Moe, kQwen2, kLlama, kGlm, kChatGlm };

// RoPE scaling, normalised from both the legacy hub form (`rope_theta` + `rope_scaling`) and the newer
// `rope_parameters` form.
struct RopeScaling {
  enum class Type { kNone, kLinear, kYarn, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // yarn, llama3 (0: not given)
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derived (0.1 * ln(factor) + 1)
  double mscale = 0.0;            // HF's optional yarn mscale / mscale_all_dim (0: unset)
  double mscale_all_dim = 0.0;
  bool truncate = true;           // yarn: HF's `truncate` (default true)
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

// The mixture-of-experts MLP of Qwen3MoeForCausalLM (transformers' Qwen3MoeSparseMoeBlock, docs/moe.md):
// per token, softmax over the router's num_experts logits (fp32), the num_experts_per_tok largest
// probabilities, renormalised to sum 1 when norm_topk_prob; the output is their weighted sum of the chosen
// experts' SwiGLU MLPs (moe_intermediate_size each). Layer l is such a layer when it is not listed in
// mlp_only_layers and (l + 1) % decoder_sparse_step == 0; the others keep the dense MLP (intermediate_size).
struct MoeConfig {
  int64_t num_experts = 0;  // 0: a dense model (every other field unused)
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;  // sorted, distinct, each in [0, num_hidden_layers)

  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const;
};

// Dual Chunk Attention (docs/dual_chunk_attention.md): config.json's `dual_chunk_attention_config`, which the
// 1M-token Qwen models (Qwen2.5-*-Instruct-1M, the Qwen3-2507 1M configuration) carry. Attention splits the
// keys by chunks of chunk_len() = chunk_size - local_size positions and rotates each query three ways (its
// own chunk, the previous chunk, the earlier ones) so that no relative position exceeds chunk_size.
struct DualChunkAttention {
  int64_t chunk_size = 0;  // 0: off (no dual_chunk_attention_config)
  int64_t local_size = 0;
  // > 0: the logits of a query and a key written for a sequence of n tokens are scaled by
  // max(1, 0.1 ln(n / original_max_position_embeddings) + 1) each (dual_chunk_scale, model/dual_chunk.h).
  int64_t original_max_position_embeddings = 0;

  bool enabled() const { return chunk_size > 0; }
  int64_t chunk_len() const { return chunk_size - local_size; }  // the positions of one chunk a query walks
  bool scales_logits() const { return enabled() && original_max_position_embeddings > 0; }
  // The prefix-cache salt of a prompt of n tokens (Sequence::cache_salt): n when its keys carry a length factor
  // other than 1 (n > original_max_position_embeddings), so only prompts of that length share cached blocks; 0
  // otherwise (the cached K/V depend on the tokens alone).
  int64_t prefix_cache_salt(int64_t n) const {
    return scales_logits() && n > original_max_position_embeddings ? n : 0;
  }
};

struct ModelConfig {
  Architecture arch = Architecture::kQwen3;
  std::string architecture_name;  // as written in config.json, e.g. "Qwen3ForCausalLM"
  std::string model_type;         // "qwen3", "qwen2", "llama", "glm", "chatglm"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the dense MLP's (MoE models: of their mlp_only / non-sparse layers)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;           // explicit, or hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;     // GLM-4 (ChatGLM layout): 10000 * rope_ratio
  RopeScaling rope_scaling;
  // RoPE rotates the first rotary_dim elements of each head (head_dim, or head_dim * partial_rotary_factor
  // for GLM-4); the rest pass through. Interleaved (GLM-4): pairs (2i, 2i + 1) at frequency i; otherwise
  // HF's rotate_half: pairs (i, i + rotary_dim / 2) (only with rotary_dim = head_dim).
  int64_t rotary_dim = 0;  // 0: head_dim (configs built by hand); the parser always sets it
  bool rope_interleaved = false;
  int64_t max_position_embeddings = 0;
  bool attention_bias = false;    // q/k/v biases (Qwen2: always true; GLM-4: attention_bias / add_qkv_bias)
  bool qk_norm = false;           // per-head q/k RMSNorm (Qwen3)
  bool tie_word_embeddings = false;
  DualChunkAttention dual_chunk_attention;  // Qwen2 / Qwen3 only; enabled() == false: plain attention
  DType torch_dtype = DType::kBF16;
  std::vector<int64_t> eos_token_ids;  // generation_config.json (int or list), else config.json
  int64_t bos_token_id = -1;
  MoeConfig moe;  // Qwen3MoeForCausalLM only
  QuantizationConfig quantization;  // config.json's quantization_config (block-scaled FP8), else none

  // Parses config.json (+ generation_config.json if present) in a model directory. Throws
  // nanovllm::Error naming the file and the field for anything missing, mistyped or unsupported.
  static ModelConfig from_model_dir(const std::filesystem::path& dir);
  // Parses config.json text (generation config not read). `origin` names the source in errors.
  static ModelConfig from_json_text(const std::string& text, const std::string& origin = "config.json");

  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
  int64_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  bool is_moe_layer(int64_t layer) const { return moe.is_moe_layer(layer); }
  bool has_dense_layer() const;  // some layer keeps the dense MLP (every layer of a dense model)
  // The longest sequence the RoPE configuration supports (max_position_embeddings; for yarn/linear
  // with a stated original length, original * factor when larger).
  int64_t max_model_len() const;
};

}  // namespace nanovllm
