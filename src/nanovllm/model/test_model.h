// Random-weight checkpoints in the Hugging Face hub's exact layout (config.json, generation_config.json,
// model.safetensors or shards + index), loadable by load_weights and by HF transformers'
// AutoModelForCausalLM. For tests and benchmarks where no real weights can be downloaded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm {

// Names accepted by test_model_config: "tiny", "qwen3-0.6b", "qwen3-4b", "qwen3-8b", "qwen3-moe-tiny",
// "qwen3-30b-a3b", "qwen3-235b-a22b", "glm4-tiny", "glm4-9b", "dca-tiny", "qwen2.5-7b-1m".
std::vector<std::string> test_model_presets();

// Hub-format config.json for a preset (the real Qwen3 configs' numbers; "tiny" is a 2-layer Qwen3 with
// hidden 64, vocab 512, bos 1, eos 2; "qwen3-moe-tiny" a 6-layer Qwen3MoeForCausalLM of the same sizes with
// 8 experts, top-2, MoE layers 1 and 5 (decoder_sparse_step 2, mlp_only_layers [3]); the glm4-* presets are
// transformers' GlmForCausalLM configs, glm4-9b GLM-4-9B-Chat-1M's; "dca-tiny" is a 2-layer Qwen2 with a small
// dual_chunk_attention_config, "qwen2.5-7b-1m" Qwen2.5-7B-Instruct-1M's, Dual Chunk Attention included).
// Throws nanovllm::Error for an unknown preset. Callers may edit fields before write_test_model.
nlohmann::json test_model_config(const std::string& preset);

// The same model as a GlmForCausalLM config in THUDM's original ChatGLM layout (ChatGLMModel: padded_vocab_size,
// kv_channels, multi_query_group_num, rope_ratio, ...). write_test_model with the same seed then writes the
// same weights under the ChatGLM tensor names. Throws for a non-GLM config or one ChatGLM cannot express.
nlohmann::json chatglm_test_model_config(const nlohmann::json& glm_config);

// The quantization_config of Qwen3-*-FP8 checkpoints (block-scaled e4m3, 128 x 128 blocks, dynamic
// activations). Set as config["quantization_config"], write_test_model writes an FP8 checkpoint.
nlohmann::json fp8_quantization_config();

// Writes config.json (as given), generation_config.json (bos/eos from the config) and bf16 weights into
// out_dir (created if needed; stale model.safetensors / index / shard files there are removed first).
// shard_max_bytes > 0: shards model-0000i-of-0000n.safetensors of at most that many data bytes (a tensor
// larger than the limit gets a shard of its own) + model.safetensors.index.json; 0: one model.safetensors.
// With a block-scaled fp8 quantization_config, every projection part (is_fp8_checkpoint_part) is written as
// F8_E4M3 codes plus F32 `<name>_scale_inv` block scales: its bf16 values quantized by quantize_fp8_blocks.
// Values are a pure function of (seed, tensor name, element index) — identical for any thread count; the
// name is the transformers-native one (a ChatGLM query_key_value holds q_proj's, k_proj's, v_proj's values):
//   embeddings (and an untied lm_head ~ N(0,1)/sqrt(H)) ~ N(0,1); linear weights ~ N(0,1)/sqrt(fan_in);
//   RMSNorm weights ~ U(0.8, 1.2); biases ~ N(0, 0.02^2).
// The config is parsed with ModelConfig::from_json_text first, so an invalid one fails with a clear error.
// num_threads: 0 = all hardware threads.
void write_test_model(const std::filesystem::path& out_dir, const nlohmann::json& config, uint64_t seed,
                      int64_t shard_max_bytes = 0, int num_threads = 0);

}  // namespace nanovllm
