// config.json's quantization_config: the block-scaled FP8 layout of Qwen3-*-FP8 parses; every other layout is
// refused naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "nanovllm/model/config.h"
#include "support/expect_error.h"

using namespace nanovllm;
using nanovllm::testing::expect_error;
using nlohmann::json;

namespace {

json qwen3_fp8_config() {
  // Qwen/Qwen3-8B-FP8's config.json: the Qwen3-8B fields plus its quantization_config, verbatim.
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 12288, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 151936,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]}})");
}

ModelConfig parse(const json& j) { return ModelConfig::from_json_text(j.dump(), "config.json"); }

TEST(QuantizationConfig, Qwen3Fp8ParsesAsBlockScaledFp8) {
  const ModelConfig c = parse(qwen3_fp8_config());
  EXPECT_TRUE(c.quantization.fp8());
  EXPECT_TRUE(c.quantization.modules_to_not_convert.empty());
  json plain = qwen3_fp8_config();
  plain.erase("quantization_config");
  EXPECT_FALSE(parse(plain).quantization.fp8());
  plain["quantization_config"] = nullptr;
  EXPECT_FALSE(parse(plain).quantization.fp8());
}

TEST(QuantizationConfig, OptionalFieldsDefaultAndModulesToNotConvertMatchAsSubstrings) {
  json j = qwen3_fp8_config();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}},
                              {"modules_to_not_convert", {"lm_head", "layers.1.mlp"}}};
  const QuantizationConfig q = parse(j).quantization;
  ASSERT_TRUE(q.fp8());
  EXPECT_TRUE(q.keeps_unquantized("lm_head.weight"));
  EXPECT_TRUE(q.keeps_unquantized("model.layers.1.mlp.down_proj.weight"));
  EXPECT_FALSE(q.keeps_unquantized("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_FALSE(q.keeps_unquantized("model.layers.11.self_attn.o_proj.weight"));
  j["quantization_config"].erase("modules_to_not_convert");
  j["quantization_config"]["ignored_layers"] = {"model.layers.0.self_attn.o_proj"};  // vLLM's name
  EXPECT_TRUE(parse(j).quantization.keeps_unquantized("model.layers.0.self_attn.o_proj.weight"));
}

TEST(QuantizationConfig, UnsupportedLayoutsAreRefusedNamingTheField) {
  auto with = [](const char* key, json value) {
    json j = qwen3_fp8_config();
    if (value.is_null()) {
      j["quantization_config"].erase(key);
    } else {
      j["quantization_config"][key] = value;
    }
    return j;
  };
  expect_error([&] { parse(with("quant_method", "awq")); }, {"config.json", "'quant_method'", "awq", "fp8"});
  expect_error([&] { parse(with("quant_method", nullptr)); }, {"'quant_method'", "missing"});
  expect_error([&] { parse(with("quant_method", 8)); }, {"'quant_method'", "string"});
  expect_error([&] { parse(with("fmt", "e5m2")); }, {"'fmt'", "e5m2", "e4m3"});
  expect_error([&] { parse(with("activation_scheme", "static")); }, {"'activation_scheme'", "static", "dynamic"});
  expect_error([&] { parse(with("weight_block_size", nullptr)); }, {"'weight_block_size'", "per-tensor"});
  expect_error([&] { parse(with("weight_block_size", {64, 64})); }, {"'weight_block_size'", "[64,64]", "[128, 128]"});
  expect_error([&] { parse(with("weight_block_size", {128})); }, {"'weight_block_size'", "[128]"});
  expect_error([&] { parse(with("weight_block_size", "128")); }, {"'weight_block_size'"});
  expect_error([&] { parse(with("modules_to_not_convert", "lm_head")); }, {"'modules_to_not_convert'", "list"});
  expect_error([&] { parse(with("modules_to_not_convert", {1})); }, {"'modules_to_not_convert'"});
  json j = qwen3_fp8_config();
  j["quantization_config"] = "fp8";
  expect_error([&] { parse(j); }, {"quantization_config", "object"});
}

TEST(QuantizationConfig, ChatGlmLayoutReadsItToo) {
  const json j = json::parse(R"({"architectures": ["ChatGLMModel"], "model_type": "chatglm",
    "padded_vocab_size": 256, "hidden_size": 128, "ffn_hidden_size": 256, "num_layers": 1,
    "num_attention_heads": 2, "multi_query_attention": true, "multi_query_group_num": 1, "kv_channels": 64,
    "seq_length": 128, "add_qkv_bias": true,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  EXPECT_TRUE(parse(j).quantization.fp8());
}

}  // namespace
