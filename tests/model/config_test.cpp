#include <gtest/gtest.h>

#include "support/expect_error.h"

#include <nlohmann/json.hpp>

#include "model/model_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/config.h"

using namespace nanovllm;
using model_test::TempDir;
using nlohmann::json;

namespace {

// The hub's Qwen/Qwen3-0.6B config.json, verbatim.
const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// meta-llama/Llama-3.1-8B-Instruct's config.json (the fields that matter).
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
})";

// Qwen/Qwen2.5-0.5B-Instruct's config.json (the fields that matter): no head_dim, no attention_bias key.
const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "use_sliding_window": false,
  "vocab_size": 151936
})";

json qwen3() { return json::parse(kQwen3_06B); }
ModelConfig parse(const json& j) { return ModelConfig::from_json_text(j.dump(), "config.json"); }

using nanovllm::testing::expect_error;

}  // namespace

TEST(ModelConfig, Qwen3HubConfig) {
  const ModelConfig c = ModelConfig::from_json_text(kQwen3_06B);
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_EQ(c.architecture_name, "Qwen3ForCausalLM");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // explicit, not 1024 / 16 = 64
  EXPECT_EQ(c.q_size(), 2048);
  EXPECT_EQ(c.kv_size(), 1024);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.max_model_len(), 40960);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.bos_token_id, 151643);
}

TEST(ModelConfig, Llama31WithLlama3Rope) {
  const ModelConfig c = ModelConfig::from_json_text(kLlama31);
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.head_dim, 128);  // derived: 4096 / 32
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.max_model_len(), 131072);  // llama3 scaling does not extend past max_position_embeddings
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
}

TEST(ModelConfig, Qwen2AlwaysHasQkvBias) {
  ModelConfig c = ModelConfig::from_json_text(kQwen25);
  EXPECT_EQ(c.arch, Architecture::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_EQ(c.num_key_value_heads, 2);
  json j = json::parse(kQwen25);
  j["attention_bias"] = false;  // not a Qwen2 switch: the model has biases regardless
  EXPECT_TRUE(parse(j).attention_bias);
}

TEST(ModelConfig, AttentionBiasFromConfigForQwen3AndLlama) {
  json j = qwen3();
  j["attention_bias"] = true;
  EXPECT_TRUE(parse(j).attention_bias);
  j = json::parse(kLlama31);
  j.erase("attention_bias");
  EXPECT_FALSE(parse(j).attention_bias);
  j["attention_bias"] = true;
  EXPECT_TRUE(parse(j).attention_bias);
}

TEST(ModelConfig, KvHeadsDefaultToHeadsAndHeadDimDerivation) {
  json j = qwen3();
  j.erase("num_key_value_heads");
  j.erase("head_dim");
  j["hidden_size"] = 960;
  j["num_attention_heads"] = 15;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 15);
  EXPECT_EQ(c.head_dim, 64);
  j["num_key_value_heads"] = nullptr;  // null behaves as absent
  EXPECT_EQ(parse(j).num_key_value_heads, 15);
}

TEST(ModelConfig, LegacyRopeScalingForms) {
  json j = qwen3();
  // Qwen3's documented YaRN override, with the legacy "type" key.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.0);
  EXPECT_TRUE(c.rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_model_len(), 131072);  // 32768 * 4 > 40960

  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.5}, {"beta_fast", 16}, {"beta_slow", 2},
                       {"attention_factor", 1.25}, {"mscale", 0.7}, {"mscale_all_dim", 0.5}, {"truncate", false}};
  c = parse(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.5);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 16);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 2);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.25);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 0.7);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.5);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.max_model_len(), 40960);  // no original length given: max_position_embeddings

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ModelConfig, NewRopeParametersForm) {
  json j = qwen3();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_DOUBLE_EQ(c.rope_theta, 250000.0);

  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1000000.0}, {"factor", 4.0},
                          {"original_max_position_embeddings", 32768}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_model_len(), 131072);

  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);

  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 10000}, {"factor", 3.0},
                          {"original_max_position_embeddings", 16384}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.max_model_len(), 49152);  // 16384 * 3 > 40960
}

TEST(ModelConfig, DTypeFieldNames) {
  json j = qwen3();
  j["torch_dtype"] = "float16";
  EXPECT_EQ(parse(j).torch_dtype, DType::kF16);
  j["torch_dtype"] = "float32";
  EXPECT_EQ(parse(j).torch_dtype, DType::kF32);
  j.erase("torch_dtype");
  j["dtype"] = "float16";  // newer transformers
  EXPECT_EQ(parse(j).torch_dtype, DType::kF16);
  j["dtype"] = "int8";
  expect_error([&] { parse(j); }, {"config.json", "'dtype'", "int8"});
}

TEST(ModelConfig, EosAsListAndGenerationConfigOverride) {
  json j = qwen3();
  j["eos_token_id"] = {151645, 151643};
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  j["eos_token_id"] = nullptr;
  EXPECT_TRUE(parse(j).eos_token_ids.empty());

  TempDir dir;
  model_test::write_file(dir / "config.json", qwen3().dump());
  EXPECT_EQ(ModelConfig::from_model_dir(dir.path()).eos_token_ids, std::vector<int64_t>{151645});
  model_test::write_file(dir / "generation_config.json",
                         R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "top_k": 20})");
  const ModelConfig c = ModelConfig::from_model_dir(dir.path());
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(c.hidden_size, 1024);
  model_test::write_file(dir / "generation_config.json", R"({"eos_token_id": 7})");
  EXPECT_EQ(ModelConfig::from_model_dir(dir.path()).eos_token_ids, std::vector<int64_t>{7});
  model_test::write_file(dir / "generation_config.json", R"({"eos_token_id": 7,)");
  expect_error([&] { ModelConfig::from_model_dir(dir.path()); }, {"generation_config.json", "invalid JSON"});
  model_test::write_file(dir / "generation_config.json", R"({"eos_token_id": "x"})");
  expect_error([&] { ModelConfig::from_model_dir(dir.path()); }, {"generation_config.json", "eos_token_id"});
}

TEST(ModelConfig, VocabSizeAndSpecialIdsAreBounded) {
  // An eos_token_id of 1e12 used to be accepted; ids and vocab_size are now bounded by 2^24 with the
  // file and the field in the error. Ids in [vocab_size, 2^24) stay a warning (HF accepts them).
  json j = qwen3();
  j["vocab_size"] = (1 << 24) + 1;
  expect_error([&] { parse(j); }, {"config.json", "'vocab_size'", "2^24"});
  j = qwen3();
  j["eos_token_id"] = 1'000'000'000'000LL;
  expect_error([&] { parse(j); }, {"config.json", "'eos_token_id'", "1000000000000"});
  j["eos_token_id"] = {151645, 1 << 24};
  expect_error([&] { parse(j); }, {"config.json", "'eos_token_id'", "16777216"});
  j["eos_token_id"] = 18446744073709551615ULL;
  expect_error([&] { parse(j); }, {"config.json", "'eos_token_id'"});
  j = qwen3();
  j["bos_token_id"] = 1'000'000'000;
  expect_error([&] { parse(j); }, {"config.json", "'bos_token_id'", "1000000000"});
  j = qwen3();
  j["pad_token_id"] = -1;
  expect_error([&] { parse(j); }, {"config.json", "'pad_token_id'"});
  j = qwen3();
  j["eos_token_id"] = (1 << 24) - 1;  // outside the vocabulary but below the limit: accepted
  EXPECT_EQ(parse(j).eos_token_ids, std::vector<int64_t>{(1 << 24) - 1});

  TempDir dir;
  model_test::write_file(dir / "config.json", qwen3().dump());
  for (const char* gen : {R"({"eos_token_id": 1000000000000})", R"({"eos_token_id": [1, 99999999999]})",
                          R"({"bos_token_id": 20000000})", R"({"pad_token_id": 20000000})"}) {
    SCOPED_TRACE(gen);
    model_test::write_file(dir / "generation_config.json", gen);
    expect_error([&] { ModelConfig::from_model_dir(dir.path()); }, {"generation_config.json", "_token_id", "2^24"});
  }
}

TEST(ModelConfig, UnknownArchitectureIsNamed) {
  json j = qwen3();
  j["architectures"] = {"MistralForCausalLM"};
  expect_error([&] { parse(j); }, {"config.json", "MistralForCausalLM", "Qwen3ForCausalLM"});
  j.erase("architectures");  // falls back to model_type
  EXPECT_EQ(parse(j).arch, Architecture::kQwen3);
  j["model_type"] = "gemma";
  expect_error([&] { parse(j); }, {"config.json", "gemma"});
}

TEST(ModelConfig, MissingAndMistypedFieldsAreNamed) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "max_position_embeddings"}) {
    json j = qwen3();
    j.erase(field);
    expect_error([&] { parse(j); }, {"config.json", std::string("'") + field + "'", "missing"});
    j[field] = "1024";
    expect_error([&] { parse(j); }, {"config.json", std::string("'") + field + "'", "positive integer"});
    j[field] = 0;
    expect_error([&] { parse(j); }, {"config.json", std::string("'") + field + "'", "positive integer"});
    j[field] = 12.5;
    expect_error([&] { parse(j); }, {std::string("'") + field + "'"});
  }
  json j = qwen3();
  j["tie_word_embeddings"] = "yes";
  expect_error([&] { parse(j); }, {"'tie_word_embeddings'", "true or false"});
  j = qwen3();
  j["rms_norm_eps"] = "small";
  expect_error([&] { parse(j); }, {"'rms_norm_eps'", "number"});
  j = qwen3();
  j["rope_theta"] = -1;
  expect_error([&] { parse(j); }, {"'rope_theta'", "positive"});
  j = qwen3();
  j["architectures"] = "Qwen3ForCausalLM";
  expect_error([&] { parse(j); }, {"'architectures'"});
  j = qwen3();
  j["hidden_act"] = "gelu";
  expect_error([&] { parse(j); }, {"'hidden_act'", "gelu"});
}

TEST(ModelConfig, InconsistentSizesAreRejected) {
  json j = qwen3();
  j["num_key_value_heads"] = 5;  // 16 % 5 != 0
  expect_error([&] { parse(j); }, {"config.json", "'num_attention_heads'", "'num_key_value_heads'"});
  j = qwen3();
  j.erase("head_dim");
  j["num_attention_heads"] = 24;  // 1024 % 24 != 0
  j["num_key_value_heads"] = 8;
  expect_error([&] { parse(j); }, {"config.json", "'hidden_size'", "head_dim"});
}

TEST(ModelConfig, RopeErrors) {
  json j = qwen3();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error([&] { parse(j); }, {"config.json", "rope_scaling", "dynamic"});
  j["rope_scaling"] = {{"rope_type", "yarn"}};
  expect_error([&] { parse(j); }, {"rope_scaling", "'factor'"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 0.5}};
  expect_error([&] { parse(j); }, {"rope_scaling", "'factor'"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error([&] { parse(j); }, {"rope_scaling", "original_max_position_embeddings"});
  j["rope_scaling"] = "yarn";
  expect_error([&] { parse(j); }, {"'rope_scaling'", "object"});
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 1e4}, {"factor", 2.0}};
  expect_error([&] { parse(j); }, {"rope_parameters", "longrope"});
}

TEST(ModelConfig, FileErrors) {
  TempDir dir;
  expect_error([&] { ModelConfig::from_model_dir(dir / "nope"); }, {"nope", "does not exist"});
  expect_error([&] { ModelConfig::from_model_dir(dir.path()); }, {"config.json", dir.path().string()});
  model_test::write_file(dir / "config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"], ");
  expect_error([&] { ModelConfig::from_model_dir(dir.path()); }, {(dir / "config.json").string(), "invalid JSON"});
  model_test::write_file(dir / "config.json", "[1, 2]");
  expect_error([&] { ModelConfig::from_model_dir(dir.path()); }, {"config.json", "object"});
  json j = qwen3();
  j.erase("vocab_size");
  model_test::write_file(dir / "config.json", j.dump());
  expect_error([&] { ModelConfig::from_model_dir(dir.path()); },
               {(dir / "config.json").string(), "'vocab_size'"});
}

namespace {

// THUDM/glm-4-9b-chat-1m's config.json (the original ChatGLM layout; auto_map left out).
const char* kGlm4Chat1M = R"({
  "_name_or_path": "THUDM/glm-4-9b-chat-1m",
  "model_type": "chatglm",
  "architectures": ["ChatGLMModel"],
  "add_bias_linear": false,
  "add_qkv_bias": true,
  "apply_query_key_layer_scaling": true,
  "apply_residual_connection_post_layernorm": false,
  "attention_dropout": 0.0,
  "attention_softmax_in_fp32": true,
  "bias_dropout_fusion": true,
  "ffn_hidden_size": 13696,
  "fp32_residual_connection": false,
  "hidden_dropout": 0.0,
  "hidden_size": 4096,
  "kv_channels": 128,
  "layernorm_epsilon": 1.5625e-07,
  "multi_query_attention": true,
  "multi_query_group_num": 4,
  "num_attention_heads": 32,
  "num_layers": 40,
  "original_rope": true,
  "padded_vocab_size": 151552,
  "post_layer_norm": true,
  "rmsnorm": true,
  "rope_ratio": 10000,
  "seq_length": 1048576,
  "use_cache": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.44.0",
  "tie_word_embeddings": false,
  "eos_token_id": [151329, 151336, 151338],
  "pad_token_id": 151329
})";

// THUDM/glm-4-9b-chat-1m-hf's config.json (transformers' GlmForCausalLM).
const char* kGlm4Chat1MHf = R"({
  "architectures": ["GlmForCausalLM"],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "eos_token_id": [151329, 151336, 151338],
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 13696,
  "max_position_embeddings": 1048576,
  "model_type": "glm",
  "num_attention_heads": 32,
  "num_hidden_layers": 40,
  "num_key_value_heads": 4,
  "pad_token_id": 151329,
  "partial_rotary_factor": 0.5,
  "rms_norm_eps": 1.5625e-07,
  "rope_theta": 100000000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.46.0",
  "use_cache": true,
  "vocab_size": 151552
})";

void expect_glm4_9b_1m(const ModelConfig& c) {
  EXPECT_EQ(c.vocab_size, 151552);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 13696);
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 64);  // RoPE on half the head
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e8);  // 10000 * rope_ratio
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1.5625e-07);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.max_model_len(), 1048576);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151329, 151336, 151338}));
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
}

}  // namespace

TEST(ModelConfig, Glm4ChatGlmLayout) {
  const ModelConfig c = ModelConfig::from_json_text(kGlm4Chat1M);
  EXPECT_EQ(c.arch, Architecture::kChatGlm);
  EXPECT_EQ(c.model_type, "chatglm");
  expect_glm4_9b_1m(c);
  json j = json::parse(kGlm4Chat1M);
  j["architectures"] = {"ChatGLMForConditionalGeneration"};
  EXPECT_EQ(parse(j).arch, Architecture::kChatGlm);
  j.erase("architectures");
  EXPECT_EQ(parse(j).arch, Architecture::kChatGlm);  // from model_type
  j["multi_query_attention"] = false;  // every head has its own K/V
  EXPECT_EQ(parse(j).num_key_value_heads, 32);
  j = json::parse(kGlm4Chat1M);
  j["add_qkv_bias"] = false;
  EXPECT_FALSE(parse(j).attention_bias);
  j.erase("rope_ratio");  // glm-4-9b-chat: base 10000
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 10000.0);
}

TEST(ModelConfig, Glm4ChatGlmLayoutRefusesVariantsByName) {
  for (auto [field, value] : {std::pair<const char*, json>{"rmsnorm", false},
                              {"post_layer_norm", false},
                              {"add_bias_linear", true},
                              {"apply_residual_connection_post_layernorm", true},
                              {"original_rope", false},
                              {"rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}}}) {
    json j = json::parse(kGlm4Chat1M);
    j[field] = value;
    expect_error([&] { parse(j); }, {field});
  }
  json j = json::parse(kGlm4Chat1M);
  j["multi_query_group_num"] = 5;
  expect_error([&] { parse(j); }, {"multi_query_group_num"});
  j = json::parse(kGlm4Chat1M);
  j["kv_channels"] = 2;  // rotary dimension 1
  expect_error([&] { parse(j); }, {"rotary dimension"});
  j = json::parse(kGlm4Chat1M);
  j.erase("seq_length");
  expect_error([&] { parse(j); }, {"seq_length"});
}

TEST(ModelConfig, Glm4TransformersLayout) {
  const ModelConfig c = ModelConfig::from_json_text(kGlm4Chat1MHf);
  EXPECT_EQ(c.arch, Architecture::kGlm);
  EXPECT_EQ(c.model_type, "glm");
  expect_glm4_9b_1m(c);
  json j = json::parse(kGlm4Chat1MHf);
  j.erase("partial_rotary_factor");  // GlmConfig's default
  j.erase("attention_bias");
  EXPECT_EQ(parse(j).rotary_dim, 64);
  EXPECT_TRUE(parse(j).attention_bias);
  // transformers 5 writes rope_parameters with the factor inside.
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e8}, {"partial_rotary_factor", 0.25}};
  EXPECT_EQ(parse(j).rotary_dim, 32);
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 1e8);
  j["rope_parameters"]["partial_rotary_factor"] = 1.5;
  expect_error([&] { parse(j); }, {"partial_rotary_factor", "(0, 1]"});
  j = json::parse(kGlm4Chat1MHf);
  j["architectures"] = {"Glm4ForCausalLM"};  // GLM-4-0414: a different decoder (extra norms)
  expect_error([&] { parse(j); }, {"Glm4ForCausalLM", "GlmForCausalLM", "ChatGLMModel"});
}

TEST(ModelConfig, QwenRopeCoversTheWholeHead) {
  const ModelConfig c = ModelConfig::from_json_text(kQwen3_06B);
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_FALSE(c.rope_interleaved);
}

namespace {

// The hub's Qwen/Qwen3-30B-A3B config.json, verbatim.
const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "max_position_embeddings": 40960,
  "max_window_layers": 48,
  "mlp_only_layers": [],
  "model_type": "qwen3_moe",
  "moe_intermediate_size": 768,
  "norm_topk_prob": true,
  "num_attention_heads": 32,
  "num_experts": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 48,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

json qwen3_moe() { return json::parse(kQwen3_30B_A3B); }

}  // namespace

TEST(ModelConfig, Qwen3MoeHubConfig) {
  const ModelConfig c = ModelConfig::from_json_text(kQwen3_30B_A3B);
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);  // Qwen3's attention
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 6144);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_TRUE(c.moe.enabled());
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 768);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.decoder_sparse_step, 1);
  EXPECT_TRUE(c.moe.mlp_only_layers.empty());
  for (int64_t l = 0; l < 48; ++l) EXPECT_TRUE(c.is_moe_layer(l)) << l;
  EXPECT_FALSE(c.has_dense_layer());
  // A dense model has no MoE layer.
  const ModelConfig dense = ModelConfig::from_json_text(kQwen3_06B);
  EXPECT_FALSE(dense.moe.enabled());
  EXPECT_FALSE(dense.is_moe_layer(0));
  EXPECT_TRUE(dense.has_dense_layer());
  // model_type alone names the architecture too.
  json j = qwen3_moe();
  j.erase("architectures");
  EXPECT_EQ(parse(j).arch, Architecture::kQwen3Moe);
}

TEST(ModelConfig, Qwen3MoeSparseStepAndMlpOnlyLayersPickTheSparseLayers) {
  json j = qwen3_moe();
  j["num_hidden_layers"] = 8;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {5, 3, 3};  // unordered, repeated: as a set
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.moe.mlp_only_layers, (std::vector<int64_t>{3, 5}));
  // transformers: sparse iff not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0.
  const std::vector<bool> want = {false, true, false, false, false, false, false, true};
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(c.is_moe_layer(l), want[static_cast<size_t>(l)]) << "layer " << l;
  EXPECT_TRUE(c.has_dense_layer());
  // Defaults as transformers' Qwen3MoeConfig.
  json d = qwen3_moe();
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                          "decoder_sparse_step", "mlp_only_layers"})
    d.erase(key);
  const ModelConfig dc = parse(d);
  EXPECT_EQ(dc.moe.num_experts, 128);
  EXPECT_EQ(dc.moe.num_experts_per_tok, 8);
  EXPECT_EQ(dc.moe.moe_intermediate_size, 768);
  EXPECT_FALSE(dc.moe.norm_topk_prob);
  EXPECT_EQ(dc.moe.decoder_sparse_step, 1);
}

TEST(ModelConfig, Qwen3MoeErrorsNameTheField) {
  json j = qwen3_moe();
  j["num_experts_per_tok"] = 129;
  expect_error([&] { parse(j); }, {"config.json", "'num_experts_per_tok'", "129", "'num_experts'"});
  j = qwen3_moe();
  j["num_experts"] = 0;
  expect_error([&] { parse(j); }, {"'num_experts'", "positive integer"});
  j = qwen3_moe();
  j["num_experts"] = 4096;
  expect_error([&] { parse(j); }, {"'num_experts'", "4096", "512"});
  j = qwen3_moe();
  j["moe_intermediate_size"] = -1;
  expect_error([&] { parse(j); }, {"'moe_intermediate_size'", "positive integer"});
  j = qwen3_moe();
  j["decoder_sparse_step"] = 0;
  expect_error([&] { parse(j); }, {"'decoder_sparse_step'", "positive integer"});
  j = qwen3_moe();
  j["norm_topk_prob"] = 1;
  expect_error([&] { parse(j); }, {"'norm_topk_prob'", "true or false"});
  j = qwen3_moe();
  j["mlp_only_layers"] = {2, 48};
  expect_error([&] { parse(j); }, {"'mlp_only_layers'", "48", "[0, 48)"});
  j["mlp_only_layers"] = 3;
  expect_error([&] { parse(j); }, {"'mlp_only_layers'", "list"});
  j = qwen3_moe();
  j["shared_expert_intermediate_size"] = 5632;  // Qwen2-MoE's shared expert
  expect_error([&] { parse(j); }, {"'shared_expert_intermediate_size'", "shared experts are not supported"});
  j["shared_expert_intermediate_size"] = 0;  // none: fine
  EXPECT_NO_THROW(parse(j));
  // intermediate_size is needed once some layer keeps the dense MLP.
  j = qwen3_moe();
  j.erase("intermediate_size");
  EXPECT_EQ(parse(j).intermediate_size, 0);  // every layer sparse: unused
  j["mlp_only_layers"] = {0};
  expect_error([&] { parse(j); }, {"'intermediate_size'", "missing"});
}

// Issue 45 (item 9): sizes are bounded, with the file and the field named. num_hidden_layers 1e9 used to
// end in std::bad_alloc (a weight table per layer), a huge max_position_embeddings in a misleading
// KV-cache message, and a huge value past 2^63 read as negative.
TEST(ModelConfig, SizesAreBoundedWithTheFieldNamed) {
  const std::vector<std::pair<const char*, json>> cases = {
      {"num_hidden_layers", 1'000'000'000},  {"num_hidden_layers", 18446744073709551615ULL},
      {"hidden_size", 1 << 20},              {"intermediate_size", 1 << 24},
      {"num_attention_heads", 4096},         {"num_key_value_heads", 4096},
      {"head_dim", 1 << 20},                 {"max_position_embeddings", int64_t{1} << 40},
      {"max_position_embeddings", (1 << 24) + 1}};
  for (const auto& [field, value] : cases) {
    SCOPED_TRACE(std::string(field) + " = " + value.dump());
    json j = qwen3();
    j[field] = value;
    if (std::string(field) == "num_attention_heads") j["num_key_value_heads"] = 4096;
    expect_error([&] { parse(j); }, {"config.json", std::string("'") + field + "'", "at most"});
  }
  json j = qwen3();
  j["max_position_embeddings"] = 1 << 24;  // at the bound
  EXPECT_EQ(parse(j).max_model_len(), 1 << 24);
  // Rope scaling past 2^24 positions.
  j = qwen3();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 1e6}, {"original_max_position_embeddings", 32768}};
  expect_error([&] { parse(j); }, {"config.json", "rope scaling", "positions"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 1e30}, {"original_max_position_embeddings", 32768}};
  expect_error([&] { parse(j); }, {"config.json", "rope scaling", "positions"});
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", int64_t{1} << 40}};
  expect_error([&] { parse(j); }, {"config.json", "'original_max_position_embeddings'", "at most"});
  // ChatGLM's own names.
  j = json::parse(kGlm4Chat1M);
  j["num_layers"] = 1'000'000'000;
  expect_error([&] { parse(j); }, {"config.json", "'num_layers'", "at most"});
  j = json::parse(kGlm4Chat1M);
  j["seq_length"] = int64_t{1} << 40;
  expect_error([&] { parse(j); }, {"config.json", "'seq_length'", "at most"});
}

namespace {

// Qwen/Qwen2.5-7B-Instruct-1M's config.json (the fields that matter), with its dual_chunk_attention_config.
const char* kQwen25_7B_1M = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "intermediate_size": 18944,
  "max_position_embeddings": 1010000,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_sliding_window": false,
  "vocab_size": 152064,
  "dual_chunk_attention_config": {
    "chunk_size": 262144,
    "local_size": 8192,
    "original_max_position_embeddings": 262144
  }
})";

}  // namespace

TEST(ModelConfig, DualChunkAttentionOfTheOneMillionTokenQwen) {
  const ModelConfig c = parse(json::parse(kQwen25_7B_1M));
  const DualChunkAttention& d = c.dual_chunk_attention;
  EXPECT_TRUE(d.enabled());
  EXPECT_EQ(d.chunk_size, 262144);
  EXPECT_EQ(d.local_size, 8192);
  EXPECT_EQ(d.chunk_len(), 262144 - 8192);
  EXPECT_EQ(d.original_max_position_embeddings, 262144);
  EXPECT_TRUE(d.scales_logits());
  EXPECT_EQ(c.max_model_len(), 1010000);
  EXPECT_FALSE(parse(qwen3()).dual_chunk_attention.enabled());  // no field: plain attention

  // The reference's defaults (vLLM: chunk_size 8192, local_size 1024, original_max_position_embeddings 0).
  json j = json::parse(kQwen25_7B_1M);
  j["dual_chunk_attention_config"] = json::object();
  const DualChunkAttention def = parse(j).dual_chunk_attention;
  EXPECT_EQ(def.chunk_size, 8192);
  EXPECT_EQ(def.local_size, 1024);
  EXPECT_EQ(def.original_max_position_embeddings, 0);
  EXPECT_FALSE(def.scales_logits());
  j["dual_chunk_attention_config"] = nullptr;  // null: absent
  EXPECT_FALSE(parse(j).dual_chunk_attention.enabled());

  // Qwen3 carries it too (the 2507 releases' 1M configuration); a local_size of 0 is a valid variant.
  j = qwen3();
  j["dual_chunk_attention_config"] = {{"chunk_size", 64}, {"local_size", 0}};
  EXPECT_EQ(parse(j).dual_chunk_attention.chunk_len(), 64);
  // And the MoE releases (Qwen3-30B-A3B / 235B-A22B-2507): Qwen3's attention beside the sparse MLP.
  j = qwen3_moe();
  j["max_position_embeddings"] = 1010000;
  j["dual_chunk_attention_config"] = {
      {"chunk_size", 262144}, {"local_size", 8192}, {"original_max_position_embeddings", 262144}};
  const ModelConfig moe = parse(j);
  EXPECT_EQ(moe.arch, Architecture::kQwen3Moe);
  EXPECT_EQ(moe.dual_chunk_attention.chunk_len(), 262144 - 8192);
  EXPECT_TRUE(moe.moe.enabled());
  // Fields that mean nothing without vLLM's sparse variant are accepted when it is off.
  j["dual_chunk_attention_config"] = {{"chunk_size", 64}, {"local_size", 8}, {"sparse_attention_enabled", false},
                                      {"sparse_attention_threshold", 32768}, {"sparse_attention_last_q", 64}};
  EXPECT_EQ(parse(j).dual_chunk_attention.chunk_len(), 56);
}

TEST(ModelConfig, DualChunkAttentionVariantsWeDoNotRunAreRefusedByName) {
  auto with = [](json dca) {
    json j = json::parse(kQwen25_7B_1M);
    j["dual_chunk_attention_config"] = std::move(dca);
    return j;
  };
  const char* f = "dual_chunk_attention_config";
  expect_error([&] { parse(with(json::array())); }, {"config.json", f, "object"});
  expect_error([&] { parse(with({{"chunk_size", 64}, {"chunk_overlap", 3}})); }, {f, "'chunk_overlap'"});
  expect_error([&] { parse(with({{"sparse_attention_config", json::array({json::object()})}})); },
               {f, "'sparse_attention_config'", "not supported"});
  expect_error([&] { parse(with({{"sparse_attention_enabled", true}})); }, {f, "'sparse_attention_enabled'"});
  expect_error([&] { parse(with({{"chunk_size", 0}})); }, {f, "'chunk_size'", "positive"});
  expect_error([&] { parse(with({{"chunk_size", "big"}})); }, {f, "'chunk_size'"});
  expect_error([&] { parse(with({{"chunk_size", 64}, {"local_size", -1}})); }, {f, "'local_size'", "non-negative"});
  expect_error([&] { parse(with({{"chunk_size", 64}, {"local_size", 64}})); }, {f, "'local_size'", "'chunk_size'"});
  expect_error([&] { parse(with({{"original_max_position_embeddings", 1.5}})); },
               {f, "'original_max_position_embeddings'"});
  expect_error([&] { parse(with({{"chunk_size", int64_t{1} << 31}})); }, {f, "'chunk_size'", "2^30"});

  json j = json::parse(kQwen25_7B_1M);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  expect_error([&] { parse(j); }, {f, "rope scaling"});
  j = json::parse(kLlama31);
  j.erase("rope_scaling");
  j["dual_chunk_attention_config"] = {{"chunk_size", 64}, {"local_size", 8}};
  expect_error([&] { parse(j); }, {f, "LlamaForCausalLM"});
}

TEST(ModelConfig, DualChunkAttentionWarnsAboutVllmsSparseConfigFile) {
  TempDir dir;
  {
    std::ofstream(dir.path() / "config.json") << kQwen25_7B_1M;
    std::ofstream(dir.path() / "sparse_attention_config.json") << "[]";
  }
  // Loads (the exact attention runs) and says that vLLM's sparse variant is not used.
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(ModelConfig::from_model_dir(dir.path()).dual_chunk_attention.enabled());
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("sparse_attention_config.json is not used"), std::string::npos) << log;
}
