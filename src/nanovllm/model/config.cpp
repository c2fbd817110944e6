// Parsing of a Hugging Face config.json (+ generation_config.json) into ModelConfig. Every user-visible
// error names the source file and the field, since a model directory is user input.
#include "nanovllm/model/config.h"

#include "nanovllm/core/logging.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/core/limits.h"

namespace nanovllm {
namespace {

using nlohmann::json;

// Upper bounds of the sizes a config.json declares, far above any real model (the largest have ~16K hidden,
// ~128 layers, 128 heads of 256): past them the file is corrupt or hostile, and an error naming the field
// beats a huge allocation. With these, every product of sizes the engine forms fits int64.
constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;
constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;

// "1024", or "2^24 (16777216)" for large powers of two.
std::string limit_text(int64_t max) {
  const int log2 = std::bit_width(static_cast<uint64_t>(max)) - 1;
  if (max < (1 << 16) || max != int64_t{1} << log2) return std::to_string(max);
  return "2^" + std::to_string(log2) + " (" + std::to_string(max) + ")";
}

// Reads one JSON object field with a type check; `where` is the file name (and the sub-object) for errors.
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  // An integer in [1, max].
  int64_t positive_int(const char* key, int64_t max) const {
    NANOVLLM_CHECK(has(key), where_, ": required field '", key, "' is missing");
    const json& v = obj_.at(key);
    const bool positive =
        v.is_number_unsigned() ? v.get<uint64_t>() > 0 : v.is_number_integer() && v.get<int64_t>() > 0;
    NANOVLLM_CHECK(positive, where_, ": field '", key, "' must be a positive integer (got ", v.dump(), ")");
    NANOVLLM_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(max), where_, ": field '", key, "' is ", v.dump(),
                   "; at most ", limit_text(max), " is supported");
    return v.get<int64_t>();
  }
  int64_t positive_int_or(const char* key, int64_t fallback, int64_t max) const {
    return has(key) ? positive_int(key, max) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    NANOVLLM_CHECK(v.is_number() && std::isfinite(v.get<double>()), where_, ": field '", key,
                   "' must be a number (got ", v.dump(), ")");
    return v.get<double>();
  }
  double positive_number_or(const char* key, double fallback) const {
    const double d = number_or(key, fallback);
    NANOVLLM_CHECK(d > 0, where_, ": field '", key, "' must be positive (got ", d, ")");
    return d;
  }
  bool bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    NANOVLLM_CHECK(v.is_boolean(), where_, ": field '", key, "' must be true or false (got ", v.dump(), ")");
    return v.get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    NANOVLLM_CHECK(v.is_string(), where_, ": field '", key, "' must be a string (got ", v.dump(), ")");
    return v.get<std::string>();
  }
  // An int, a list of ints, or null/absent (empty). Ids are < 2^24 (kMaxVocabSize): a larger one can be
  // no token of any model.
  std::vector<int64_t> token_ids(const char* key) const {
    std::vector<int64_t> ids;
    if (!has(key)) return ids;
    const json& v = obj_.at(key);
    NANOVLLM_CHECK(!v.is_array() || v.size() <= 1024, where_, ": field '", key, "' lists ", v.size(),
                   " token ids; at most 1024 are supported");
    auto one = [&](const json& e) {
      NANOVLLM_CHECK(e.is_number_integer() && (e.is_number_unsigned() || e.get<int64_t>() >= 0), where_, ": field '",
                     key, "' must be a non-negative token id or a list of them (got ", v.dump(), ")");
      NANOVLLM_CHECK(e.get<uint64_t>() < static_cast<uint64_t>(kMaxVocabSize), where_, ": field '", key,
                     "' holds token id ", e.dump(), ", outside [0, 2^24) (no vocabulary is larger)");
      ids.push_back(e.get<int64_t>());
    };
    if (v.is_array()) {
      for (const json& e : v) one(e);
    } else {
      one(v);
    }
    return ids;
  }
  const std::string& where() const { return where_; }
  const json& json_field(const char* key) const { return obj_.at(key); }

 private:
  const json& obj_;
  std::string where_;
};

json parse_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    NANOVLLM_FAIL(origin, ": invalid JSON: ", e.what());
  }
  NANOVLLM_CHECK(j.is_object(), origin, ": expected a JSON object at the top level");
  return j;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NANOVLLM_CHECK(in.good(), "cannot open ", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

DType parse_dtype(const std::string& s, const std::string& where, const char* key) {
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  if (s == "float32" || s == "float") return DType::kF32;
  NANOVLLM_FAIL(where, ": field '", key, "' has unsupported dtype '", s,
                "' (supported: bfloat16, float16, float32)");
}

// Both forms normalise to a `rope` object: the legacy `rope_scaling` (theta at the top level) and the newer
// `rope_parameters` (theta inside).
void parse_rope(const json& j, const std::string& origin, ModelConfig& c) {
  const Fields top(j, origin);
  c.rope_theta = top.positive_number_or("rope_theta", 10000.0);
  const char* key = nullptr;
  if (top.has("rope_parameters")) {
    key = "rope_parameters";
  } else if (top.has("rope_scaling")) {
    key = "rope_scaling";
  } else {
    return;
  }
  const json& r = j.at(key);
  NANOVLLM_CHECK(r.is_object(), origin, ": field '", key, "' must be an object or null (got ", r.dump(), ")");
  const Fields f(r, origin + ": " + key);
  if (std::string(key) == "rope_parameters") c.rope_theta = f.positive_number_or("rope_theta", c.rope_theta);

  std::string type = f.string_or("rope_type", f.string_or("type", "default"));
  RopeScaling& s = c.rope_scaling;
  if (type == "default") {
    s.type = RopeScaling::Type::kNone;
    return;
  }
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::kYarn;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
  } else {
    NANOVLLM_FAIL(f.where(), ": unsupported rope type '", type, "' (supported: default, linear, yarn, llama3)");
  }
  NANOVLLM_CHECK(f.has("factor"), f.where(), ": required field 'factor' is missing for rope type '", type, "'");
  s.factor = f.positive_number_or("factor", 1.0);
  NANOVLLM_CHECK(s.factor >= 1.0, f.where(), ": field 'factor' must be >= 1 (got ", s.factor, ")");
  s.original_max_position_embeddings = f.positive_int_or("original_max_position_embeddings", 0, kMaxPositions);
  if (s.type == RopeScaling::Type::kYarn) {
    s.beta_fast = f.positive_number_or("beta_fast", 32.0);
    s.beta_slow = f.positive_number_or("beta_slow", 1.0);
    NANOVLLM_CHECK(s.beta_fast > s.beta_slow, f.where(), ": 'beta_fast' (", s.beta_fast,
                   ") must be larger than 'beta_slow' (", s.beta_slow, ")");
    s.attention_factor = f.number_or("attention_factor", 0.0);
    NANOVLLM_CHECK(s.attention_factor >= 0, f.where(), ": field 'attention_factor' must be positive");
    s.mscale = f.number_or("mscale", 0.0);
    s.mscale_all_dim = f.number_or("mscale_all_dim", 0.0);
    s.truncate = f.bool_or("truncate", true);
  } else if (s.type == RopeScaling::Type::kLlama3) {
    NANOVLLM_CHECK(s.original_max_position_embeddings > 0, f.where(),
                   ": required field 'original_max_position_embeddings' is missing for rope type 'llama3'");
    s.low_freq_factor = f.positive_number_or("low_freq_factor", 1.0);
    s.high_freq_factor = f.positive_number_or("high_freq_factor", 4.0);
    NANOVLLM_CHECK(s.high_freq_factor > s.low_freq_factor, f.where(), ": 'high_freq_factor' (",
                   s.high_freq_factor, ") must be larger than 'low_freq_factor' (", s.low_freq_factor, ")");
  }
}

// `dual_chunk_attention_config`, read as vLLM reads it (DualChunkFlashAttentionImpl.__init__,
// DualChunkFlashAttentionMetadataBuilder.build; docs/dual_chunk_attention.md): chunk_size (default 8192),
// local_size (default 1024), original_max_position_embeddings (default 0: no logit scaling). vLLM's sparse
// variant (sparse_attention_config / sparse_attention_enabled) is not implemented and is refused; its
// sparse_attention_threshold and sparse_attention_last_q mean nothing without it and are only type-checked.
// Any other field is refused by name.
void parse_dual_chunk(const json& j, const std::string& origin, ModelConfig& c) {
  const char* key = "dual_chunk_attention_config";
  const json& d = j.at(key);
  NANOVLLM_CHECK(d.is_object(), origin, ": field '", key, "' must be an object or null (got ", d.dump(), ")");
  const std::string where = origin + ": " + key;
  const Fields f(d, where);
  // Qwen3-MoE: Qwen3's attention (the Qwen3-2507 MoE releases ship a 1M configuration with it, as vLLM runs them).
  NANOVLLM_CHECK(c.arch == Architecture::kQwen2 || c.arch == Architecture::kQwen3 || c.arch == Architecture::kQwen3Moe,
                 origin, ": field '", key, "' is supported for Qwen2ForCausalLM, Qwen3ForCausalLM and "
                 "Qwen3MoeForCausalLM only (this is ", c.architecture_name, ")");
  // vLLM's get_rope builds DualChunkRotaryEmbedding from rope_theta alone and drops any rope scaling; rather
  // than drop it silently, such a config is refused.
  NANOVLLM_CHECK(c.rope_scaling.type == RopeScaling::Type::kNone, origin, ": field '", key,
                 "' together with a rope scaling (rope_scaling / rope_parameters) is not supported");

  for (const auto& [name, value] : d.items()) {
    const bool known = name == "chunk_size" || name == "local_size" || name == "original_max_position_embeddings" ||
                       name == "sparse_attention_config" || name == "sparse_attention_enabled" ||
                       name == "sparse_attention_threshold" || name == "sparse_attention_last_q";
    NANOVLLM_CHECK(known, where, ": unknown field '", name,
                   "' (supported: chunk_size, local_size, original_max_position_embeddings)");
  }
  NANOVLLM_CHECK(!f.has("sparse_attention_config"), where,
                 ": field 'sparse_attention_config' (vLLM's sparse Dual Chunk Attention) is not supported; "
                 "remove it to run exact Dual Chunk Attention");
  NANOVLLM_CHECK(!f.bool_or("sparse_attention_enabled", false), where,
                 ": field 'sparse_attention_enabled' = true (vLLM's sparse Dual Chunk Attention) is not supported");
  (void)f.positive_int_or("sparse_attention_threshold", 1, kMaxPositions);
  (void)f.positive_int_or("sparse_attention_last_q", 1, kMaxPositions);
  auto non_negative = [&](const char* name, int64_t fallback) {
    if (!f.has(name)) return fallback;
    const json& v = d.at(name);
    NANOVLLM_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, where, ": field '", name,
                   "' must be a non-negative integer (got ", v.dump(), ")");
    return v.get<int64_t>();
  };
  DualChunkAttention& dca = c.dual_chunk_attention;
  // Positions are int32 on the device; the successive-chunk rotation reaches chunk_len + chunk_len - 1.
  dca.chunk_size = f.positive_int_or("chunk_size", 8192, int64_t{1} << 30);
  dca.local_size = non_negative("local_size", 1024);
  dca.original_max_position_embeddings = non_negative("original_max_position_embeddings", 0);
  NANOVLLM_CHECK(dca.local_size < dca.chunk_size, where, ": field 'local_size' (", dca.local_size,
                 ") must be smaller than 'chunk_size' (", dca.chunk_size, ")");
}

// The fields every architecture reads the same way: dtype, eos / bos / pad ids, quantization_config.
void parse_dtype_and_ids(const Fields& f, ModelConfig& c) {
  // Newer transformers write `dtype`, older `torch_dtype`.
  if (f.has("dtype")) {
    c.torch_dtype = parse_dtype(f.string_or("dtype", ""), f.where(), "dtype");
  } else if (f.has("torch_dtype")) {
    c.torch_dtype = parse_dtype(f.string_or("torch_dtype", ""), f.where(), "torch_dtype");
  }
  c.eos_token_ids = f.token_ids("eos_token_id");
  const std::vector<int64_t> bos = f.token_ids("bos_token_id");
  NANOVLLM_CHECK(bos.size() <= 1, f.where(), ": field 'bos_token_id' must be a single token id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  (void)f.token_ids("pad_token_id");  // unused, but a broken value is reported like the others
  if (f.has("quantization_config"))
    c.quantization = parse_quantization_config(f.json_field("quantization_config"), f.where());
}

void check_heads(const std::string& origin, const ModelConfig& c, const char* kv_field) {
  NANOVLLM_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, origin, ": field 'num_attention_heads' (",
                 c.num_attention_heads, ") must be a multiple of '", kv_field, "' (", c.num_key_value_heads, ")");
}

// Head size from `field` (kv_channels in ChatGLM, head_dim elsewhere), else hidden_size / num_attention_heads.
int64_t read_head_dim(const Fields& f, const std::string& origin, const ModelConfig& c, const char* field) {
  if (f.has(field)) return f.positive_int(field, kMaxHeadDim);
  NANOVLLM_CHECK(c.hidden_size % c.num_attention_heads == 0, origin, ": field 'hidden_size' (", c.hidden_size,
                 ") must be a multiple of 'num_attention_heads' (", c.num_attention_heads, ") when '", field,
                 "' is not given");
  return c.hidden_size / c.num_attention_heads;
}

// GLM-4 shares the RoPE of ChatGLM: rotary on the first rotary_dim elements, pairs (2i, 2i + 1).
void set_glm_rope(const std::string& origin, const char* field, double partial_rotary_factor, ModelConfig& c) {
  NANOVLLM_CHECK(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0, origin, ": field '", field,
                 "' must be in (0, 1] (got ", partial_rotary_factor, ")");
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial_rotary_factor);  // HF: int(D * f)
  NANOVLLM_CHECK(c.rotary_dim >= 2 && c.rotary_dim % 2 == 0, origin, ": the rotary dimension ", c.rotary_dim,
                 " (head_dim ", c.head_dim, " x ", field, " ", partial_rotary_factor, ") must be even and >= 2");
  c.rope_interleaved = true;
}

// THUDM's ChatGLM config.json (configuration_chatglm.py): its own field names, and switches for variants
// GLM-4 never uses, each refused by name rather than computed wrongly.
void parse_chatglm(const json& j, const std::string& origin, ModelConfig& c) {
  const Fields f(j, origin);
  c.vocab_size = f.has("padded_vocab_size") ? f.positive_int("padded_vocab_size", kMaxVocabSize)
                                             : f.positive_int("vocab_size", kMaxVocabSize);
  c.hidden_size = f.positive_int("hidden_size", kMaxHiddenSize);
  c.intermediate_size = f.positive_int("ffn_hidden_size", kMaxIntermediateSize);
  c.num_hidden_layers =
      f.has("num_layers") ? f.positive_int("num_layers", kMaxLayers) : f.positive_int("num_hidden_layers", kMaxLayers);
  c.num_attention_heads = f.positive_int("num_attention_heads", kMaxHeads);
  c.num_key_value_heads = f.bool_or("multi_query_attention", false) ? f.positive_int("multi_query_group_num", kMaxHeads)
                                                                    : c.num_attention_heads;
  check_heads(origin, c, "multi_query_group_num");
  c.head_dim = read_head_dim(f, origin, c, "kv_channels");
  c.rms_norm_eps = f.positive_number_or("layernorm_epsilon", 1e-5);
  c.max_position_embeddings = f.positive_int("seq_length", kMaxPositions);
  // modeling_chatglm.py: RotaryEmbedding(kv_channels // 2, rope_ratio) with base 10000 * rope_ratio.
  c.rope_theta = 10000.0 * f.positive_number_or("rope_ratio", 1.0);
  set_glm_rope(origin, "kv_channels / 2", 0.5, c);
  c.attention_bias = f.bool_or("add_qkv_bias", false);
  c.qk_norm = false;
  c.tie_word_embeddings = false;  // ChatGLM always has its own output_layer
  NANOVLLM_CHECK(f.bool_or("rmsnorm", true), origin, ": field 'rmsnorm' = false (LayerNorm) is not supported");
  NANOVLLM_CHECK(f.bool_or("post_layer_norm", true), origin,
                 ": field 'post_layer_norm' = false is not supported (GLM-4 has a final norm)");
  NANOVLLM_CHECK(!f.bool_or("add_bias_linear", false), origin,
                 ": field 'add_bias_linear' = true is not supported (GLM-4 has biases only on query_key_value)");
  NANOVLLM_CHECK(!f.bool_or("apply_residual_connection_post_layernorm", false), origin,
                 ": field 'apply_residual_connection_post_layernorm' = true is not supported");
  NANOVLLM_CHECK(f.bool_or("original_rope", true), origin, ": field 'original_rope' = false is not supported");
  NANOVLLM_CHECK(!f.has("rope_scaling"), origin, ": field 'rope_scaling' is not supported for ChatGLM");
  NANOVLLM_CHECK(!f.has("dual_chunk_attention_config"), origin,
                 ": field 'dual_chunk_attention_config' is not supported for ChatGLM");
  parse_dtype_and_ids(f, c);
}


// Qwen3MoeConfig's mixture-of-experts fields (defaults as transformers' Qwen3MoeConfig). Fields for
// variants this engine does not implement are refused by name; the training-only ones are ignored.
void parse_moe(const json& j, const std::string& origin, ModelConfig& c) {
  const Fields f(j, origin);
  MoeConfig& m = c.moe;
  m.num_experts = f.positive_int_or("num_experts", 128, kMaxExperts);
  m.num_experts_per_tok = f.positive_int_or("num_experts_per_tok", 8, kMaxExperts);
  m.moe_intermediate_size = f.positive_int_or("moe_intermediate_size", 768, kMaxIntermediateSize);
  m.norm_topk_prob = f.bool_or("norm_topk_prob", false);
  m.decoder_sparse_step = f.positive_int_or("decoder_sparse_step", 1, kMaxLayers);
  NANOVLLM_CHECK(m.num_experts_per_tok <= m.num_experts, origin, ": field 'num_experts_per_tok' (",
                 m.num_experts_per_tok, ") must not exceed 'num_experts' (", m.num_experts, ")");
  if (f.has("mlp_only_layers")) {
    const json& v = j.at("mlp_only_layers");
    NANOVLLM_CHECK(v.is_array(), origin, ": field 'mlp_only_layers' must be a list of layer indices (got ", v.dump(),
                   ")");
    for (const json& e : v) {
      NANOVLLM_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < c.num_hidden_layers,
                     origin, ": field 'mlp_only_layers' holds ", e.dump(), ", not a layer index in [0, ",
                     c.num_hidden_layers, ")");
      m.mlp_only_layers.push_back(e.get<int64_t>());
    }
    std::sort(m.mlp_only_layers.begin(), m.mlp_only_layers.end());
    m.mlp_only_layers.erase(std::unique(m.mlp_only_layers.begin(), m.mlp_only_layers.end()), m.mlp_only_layers.end());
  }
  // Qwen2-MoE's shared expert (and its gate) is not part of Qwen3-MoE; a config asking for one would load
  // wrong, so it is refused rather than ignored.
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts"}) {
    if (!f.has(key)) continue;
    const json& v = j.at(key);
    NANOVLLM_CHECK(v.is_number_integer() && v.get<int64_t>() == 0, origin, ": field '", key, "' = ", v.dump(),
                   ": shared experts are not supported (Qwen3MoeForCausalLM has none)");
  }
  // output_router_logits / router_aux_loss_coef only matter for training (the load-balancing loss);
  // inference ignores them, as transformers does when no labels are given.
  (void)f.bool_or("output_router_logits", false);
  (void)f.number_or("router_aux_loss_coef", 0.0);
  if (c.has_dense_layer()) {
    c.intermediate_size = f.positive_int("intermediate_size", kMaxIntermediateSize);  // required: some layer keeps the dense MLP
  } else {
    c.intermediate_size = f.positive_int_or("intermediate_size", 0, kMaxIntermediateSize);  // present in hub configs, unused
  }
}

}  // namespace

bool MoeConfig::is_moe_layer(int64_t layer) const {
  if (!enabled()) return false;
  if (std::binary_search(mlp_only_layers.begin(), mlp_only_layers.end(), layer)) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

bool ModelConfig::has_dense_layer() const {
  if (!moe.enabled()) return true;
  for (int64_t l = 0; l < num_hidden_layers; ++l)
    if (!is_moe_layer(l)) return true;
  return false;
}

ModelConfig ModelConfig::from_json_text(const std::string& text, const std::string& origin) {
  const json j = parse_json(text, origin);
  const Fields f(j, origin);
  ModelConfig c;
  constexpr const char* kSupported =
      "Qwen3ForCausalLM, Qwen3MoeForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, GlmForCausalLM, ChatGLMModel, "
      "ChatGLMForConditionalGeneration";

  // Architecture: `architectures[0]`, else `model_type`.
  if (f.has("architectures")) {
    const json& a = j.at("architectures");
    NANOVLLM_CHECK(a.is_array() && !a.empty() && a.at(0).is_string(), origin,
                   ": field 'architectures' must be a non-empty list of strings (got ", a.dump(), ")");
    c.architecture_name = a.at(0).get<std::string>();
  }
  c.model_type = f.string_or("model_type", "");
  if (c.architecture_name.empty()) {
    if (c.model_type == "qwen3") c.architecture_name = "Qwen3ForCausalLM";
    if (c.model_type == "qwen3_moe") c.architecture_name = "Qwen3MoeForCausalLM";
    if (c.model_type == "qwen2") c.architecture_name = "Qwen2ForCausalLM";
    if (c.model_type == "llama") c.architecture_name = "LlamaForCausalLM";
    if (c.model_type == "glm") c.architecture_name = "GlmForCausalLM";
    if (c.model_type == "chatglm") c.architecture_name = "ChatGLMModel";
    NANOVLLM_CHECK(!c.architecture_name.empty(), origin,
                   ": field 'architectures' is missing and 'model_type' is '", c.model_type, "' (supported: ",
                   kSupported, ")");
  }
  if (c.architecture_name == "Qwen3ForCausalLM") {
    c.arch = Architecture::kQwen3;
    if (c.model_type.empty()) c.model_type = "qwen3";
  } else if (c.architecture_name == "Qwen3MoeForCausalLM") {
    c.arch = Architecture::kQwen3Moe;
    if (c.model_type.empty()) c.model_type = "qwen3_moe";
  } else if (c.architecture_name == "Qwen2ForCausalLM") {
    c.arch = Architecture::kQwen2;
    if (c.model_type.empty()) c.model_type = "qwen2";
  } else if (c.architecture_name == "LlamaForCausalLM") {
    c.arch = Architecture::kLlama;
    if (c.model_type.empty()) c.model_type = "llama";
  } else if (c.architecture_name == "GlmForCausalLM") {
    c.arch = Architecture::kGlm;
    if (c.model_type.empty()) c.model_type = "glm";
  } else if (c.architecture_name == "ChatGLMModel" || c.architecture_name == "ChatGLMForConditionalGeneration") {
    c.arch = Architecture::kChatGlm;
    if (c.model_type.empty()) c.model_type = "chatglm";
    parse_chatglm(j, origin, c);
    return c;
  } else {
    NANOVLLM_FAIL(origin, ": unsupported architecture '", c.architecture_name, "' (supported: ", kSupported, ")");
  }

  c.vocab_size = f.positive_int("vocab_size", kMaxVocabSize);
  c.hidden_size = f.positive_int("hidden_size", kMaxHiddenSize);
  c.num_hidden_layers = f.positive_int("num_hidden_layers", kMaxLayers);
  if (c.arch == Architecture::kQwen3Moe) {
    parse_moe(j, origin, c);  // sets intermediate_size (needed only by dense layers)
  } else {
    c.intermediate_size = f.positive_int("intermediate_size", kMaxIntermediateSize);
  }
  c.num_attention_heads = f.positive_int("num_attention_heads", kMaxHeads);
  c.num_key_value_heads = f.positive_int_or("num_key_value_heads", c.num_attention_heads, kMaxHeads);
  check_heads(origin, c, "num_key_value_heads");
  c.head_dim = read_head_dim(f, origin, c, "head_dim");
  NANOVLLM_CHECK(c.head_dim % 2 == 0, origin, ": field 'head_dim' (", c.head_dim, ") must be even for RoPE");
  c.rotary_dim = c.head_dim;
  c.rms_norm_eps = f.positive_number_or("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.positive_int("max_position_embeddings", kMaxPositions);
  parse_rope(j, origin, c);
  NANOVLLM_CHECK(c.max_model_len() <= kMaxPositions, origin, ": rope scaling extends the context to ",
                 c.max_model_len(), " positions (original_max_position_embeddings x factor); at most ", kMaxPositions,
                 " are supported");

  const std::string act = f.string_or("hidden_act", "silu");
  NANOVLLM_CHECK(act == "silu", origin, ": field 'hidden_act' is '", act, "'; only 'silu' is supported");
  NANOVLLM_CHECK(!f.bool_or("mlp_bias", false), origin, ": field 'mlp_bias' = true is not supported");
  NANOVLLM_CHECK(!f.bool_or("use_sliding_window", false), origin,
                 ": field 'use_sliding_window' = true is not supported");

  switch (c.arch) {
    case Architecture::kQwen2:
      // Qwen2's attention always has q/k/v biases (the HF config has no switch for it).
      c.attention_bias = true;
      c.qk_norm = false;
      break;
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe:  // Qwen3's attention (q/k RMSNorm), the MLP of its MoE layers aside
      c.attention_bias = f.bool_or("attention_bias", false);
      c.qk_norm = true;
      break;
    case Architecture::kLlama:
      c.attention_bias = f.bool_or("attention_bias", false);
      c.qk_norm = false;
      break;
    case Architecture::kGlm: {
      // GlmConfig: attention_bias defaults to true (q/k/v only; o_proj never has one), and
      // partial_rotary_factor to 0.5, at the top level or (transformers 5) inside rope_parameters.
      c.attention_bias = f.bool_or("attention_bias", true);
      c.qk_norm = false;
      double factor = f.number_or("partial_rotary_factor", 0.5);
      if (f.has("rope_parameters") && j.at("rope_parameters").is_object())
        factor = Fields(j.at("rope_parameters"), origin + ": rope_parameters").number_or("partial_rotary_factor", factor);
      set_glm_rope(origin, "partial_rotary_factor", factor, c);
      break;
    }
    case Architecture::kChatGlm:
      break;  // parsed above
  }
  c.tie_word_embeddings = f.bool_or("tie_word_embeddings", false);
  parse_dtype_and_ids(f, c);
  if (f.has("dual_chunk_attention_config")) parse_dual_chunk(j, origin, c);
  return c;
}

ModelConfig ModelConfig::from_model_dir(const std::filesystem::path& dir) {
  NANOVLLM_CHECK(std::filesystem::is_directory(dir), "model directory ", dir.string(), " does not exist");
  const std::filesystem::path config_path = dir / "config.json";
  NANOVLLM_CHECK(std::filesystem::is_regular_file(config_path), "no config.json in model directory ",
                 dir.string());
  ModelConfig c = from_json_text(read_text_file(config_path), config_path.string());

  // generation_config.json's eos (int or list) overrides config.json's: chat models list the end-of-turn
  // token there.
  const std::filesystem::path gen_path = dir / "generation_config.json";
  if (std::filesystem::is_regular_file(gen_path)) {
    const json g = parse_json(read_text_file(gen_path), gen_path.string());
    const Fields f(g, gen_path.string());
    if (f.has("eos_token_id")) c.eos_token_ids = f.token_ids("eos_token_id");
    const std::vector<int64_t> bos = f.token_ids("bos_token_id");
    if (c.bos_token_id < 0 && bos.size() == 1) c.bos_token_id = bos[0];
    (void)f.token_ids("pad_token_id");  // unused, but a broken value is reported like the others
  }
  // vLLM merges this file into dual_chunk_attention_config and then runs its sparse (vertical-slash) Dual Chunk
  // Attention for prompts over sparse_attention_threshold tokens; here the exact (dense) one runs.
  if (c.dual_chunk_attention.enabled() && std::filesystem::is_regular_file(dir / "sparse_attention_config.json"))
    NANOVLLM_WARN(dir.string(), ": sparse_attention_config.json is not used: Dual Chunk Attention runs exact (dense) "
                  "attention unless --sparse-prefill-policy asks for a sparse one (minference is the vertical-slash "
                  "approximation vLLM runs for long prompts, with its own sizes)");
  // An EOS id inside [vocab_size, 2^24) can never be sampled; HF accepts such configs (small test models
  // keep the real model's special ids), so only warn.
  for (int64_t id : c.eos_token_ids)
    if (id >= c.vocab_size)
      NANOVLLM_WARN(dir.string(), ": eos_token_id ", id, " is outside the vocabulary (", c.vocab_size,
                    ") and can never be generated");
  return c;
}

int64_t ModelConfig::max_model_len() const {
  int64_t len = max_position_embeddings;
  const bool extends = rope_scaling.type == RopeScaling::Type::kYarn || rope_scaling.type == RopeScaling::Type::kLinear;
  if (extends && rope_scaling.original_max_position_embeddings > 0) {
    const double scaled = static_cast<double>(rope_scaling.original_max_position_embeddings) * rope_scaling.factor;
    if (scaled > static_cast<double>(len))  // saturated: from_json_text refuses more than kMaxPositions
      len = scaled < 9.0e18 ? static_cast<int64_t>(scaled) : std::numeric_limits<int64_t>::max();
  }
  return len;
}

}  // namespace nanovllm
