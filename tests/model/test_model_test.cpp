#include <gtest/gtest.h>

#include "support/expect_error.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "model/model_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/safetensors.h"
#include "nanovllm/model/test_model.h"
#include "nanovllm/model/weights.h"

using namespace nanovllm;
using namespace model_test;
using nlohmann::json;

namespace {

using nanovllm::testing::expect_error;

std::vector<float> bf16_values(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = (static_cast<uint32_t>(static_cast<unsigned char>(bytes[2 * i])) |
                        static_cast<uint32_t>(static_cast<unsigned char>(bytes[2 * i + 1])) << 8)
                       << 16;
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

struct Stats {
  double mean = 0, std = 0, min = 1e30, max = -1e30;
};
Stats stats(const std::vector<float>& v) {
  Stats s;
  for (float x : v) {
    s.mean += x;
    s.min = std::min<double>(s.min, x);
    s.max = std::max<double>(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (float x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}

// Every file of a model dir, by name.
std::map<std::string, std::string> dir_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_file(e.path());
  return out;
}

}  // namespace

TEST(TestModel, PresetsMatchTheHubConfigs) {
  EXPECT_EQ(test_model_presets(),
            (std::vector<std::string>{"tiny", "qwen3-0.6b", "qwen3-4b", "qwen3-8b", "qwen3-moe-tiny", "qwen3-30b-a3b",
                                      "qwen3-235b-a22b", "glm4-tiny", "glm4-9b", "dca-tiny", "qwen2.5-7b-1m"}));
  // Qwen3-MoE: total and activated parameters from the model cards (30.5B / 3.3B, 235B / 22B); activated =
  // attention + router + 8 experts per layer + embedding and LM head.
  for (auto [preset, total, active] : {std::tuple{"qwen3-30b-a3b", 30.5e9, 3.3e9}, {"qwen3-235b-a22b", 235e9, 22e9}}) {
    const json j = test_model_config(preset);
    EXPECT_EQ(j["architectures"], json::array({"Qwen3MoeForCausalLM"}));
    EXPECT_EQ(j["model_type"], "qwen3_moe");
    const ModelConfig c = ModelConfig::from_json_text(j.dump());
    double all = 0, experts = 0;
    for (const WeightSpec& s : weight_table(c)) {
      all += static_cast<double>(s.shape.numel());
      if (s.name.find(".mlp.experts.") != std::string::npos) experts += static_cast<double>(s.shape.numel());
    }
    const double activated = all - experts * (1.0 - 8.0 / 128.0);
    EXPECT_NEAR(all / total, 1.0, 0.01) << preset;
    EXPECT_NEAR(activated / active, 1.0, 0.05) << preset;
  }
  struct Want { const char* preset; int64_t hidden, inter, layers, heads, kv; bool tied; double non_embed_params; };
  // Non-embedding parameter counts from the Qwen3 model cards: 0.44B, 3.6B, 6.95B.
  for (const Want& w : {Want{"qwen3-0.6b", 1024, 3072, 28, 16, 8, true, 0.44e9},
                        Want{"qwen3-4b", 2560, 9728, 36, 32, 8, true, 3.6e9},
                        Want{"qwen3-8b", 4096, 12288, 36, 32, 8, false, 6.95e9}}) {
    const json j = test_model_config(w.preset);
    EXPECT_EQ(j["architectures"], json::array({"Qwen3ForCausalLM"}));
    EXPECT_EQ(j["model_type"], "qwen3");
    EXPECT_EQ(j["torch_dtype"], "bfloat16");
    EXPECT_TRUE(j["rope_scaling"].is_null());
    const ModelConfig c = ModelConfig::from_json_text(j.dump());
    EXPECT_EQ(c.hidden_size, w.hidden) << w.preset;
    EXPECT_EQ(c.intermediate_size, w.inter) << w.preset;
    EXPECT_EQ(c.num_hidden_layers, w.layers) << w.preset;
    EXPECT_EQ(c.num_attention_heads, w.heads) << w.preset;
    EXPECT_EQ(c.num_key_value_heads, w.kv) << w.preset;
    EXPECT_EQ(c.head_dim, 128) << w.preset;
    EXPECT_EQ(c.vocab_size, 151936) << w.preset;
    EXPECT_EQ(c.tie_word_embeddings, w.tied) << w.preset;
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.max_position_embeddings, 40960);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
    double non_embed = 0;
    for (const WeightSpec& s : weight_table(c))
      if (s.name != "model.embed_tokens.weight" && s.name != "lm_head.weight") non_embed += static_cast<double>(s.shape.numel());
    EXPECT_NEAR(non_embed / w.non_embed_params, 1.0, 0.01) << w.preset;
  }
  const ModelConfig tiny = ModelConfig::from_json_text(test_model_config("tiny").dump());
  EXPECT_EQ(tiny.hidden_size, 64);
  EXPECT_EQ(tiny.intermediate_size, 128);
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.num_attention_heads, 4);
  EXPECT_EQ(tiny.num_key_value_heads, 2);
  EXPECT_EQ(tiny.head_dim, 16);
  EXPECT_EQ(tiny.vocab_size, 512);
  EXPECT_TRUE(tiny.tie_word_embeddings);
  EXPECT_EQ(tiny.eos_token_ids, std::vector<int64_t>{2});
  expect_error([] { test_model_config("qwen3-72b"); }, {"qwen3-72b", "tiny"});
}

// GLM-4-9B-Chat-1M (THUDM/glm-4-9b-chat-1m-hf): 9.4B parameters, 4 KV groups of 128, RoPE on 64 of 128
// with theta 10000 * rope_ratio 10000; the same model in the ChatGLM layout.
TEST(TestModel, Glm4PresetsMatchTheHubConfigs) {
  const json j = test_model_config("glm4-9b");
  EXPECT_EQ(j["architectures"], json::array({"GlmForCausalLM"}));
  const ModelConfig c = ModelConfig::from_json_text(j.dump());
  EXPECT_EQ(c.arch, Architecture::kGlm);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 13696);
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e8);
  EXPECT_EQ(c.vocab_size, 151552);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151329, 151336, 151338}));
  double params = 0;
  for (const WeightSpec& s : weight_table(c)) params += static_cast<double>(s.shape.numel());
  EXPECT_NEAR(params / 9.4e9, 1.0, 0.015);

  const ModelConfig g = ModelConfig::from_json_text(chatglm_test_model_config(j).dump());
  EXPECT_EQ(g.arch, Architecture::kChatGlm);
  for (auto [a, b] : {std::pair{g.hidden_size, c.hidden_size}, {g.intermediate_size, c.intermediate_size},
                      {g.num_hidden_layers, c.num_hidden_layers}, {g.num_attention_heads, c.num_attention_heads},
                      {g.num_key_value_heads, c.num_key_value_heads}, {g.head_dim, c.head_dim},
                      {g.rotary_dim, c.rotary_dim}, {g.vocab_size, c.vocab_size},
                      {g.max_position_embeddings, c.max_position_embeddings}})
    EXPECT_EQ(a, b);
  EXPECT_DOUBLE_EQ(g.rope_theta, c.rope_theta);
  EXPECT_DOUBLE_EQ(g.rms_norm_eps, c.rms_norm_eps);
  EXPECT_EQ(g.eos_token_ids, c.eos_token_ids);
  EXPECT_EQ(weight_table(g).size(), weight_table(c).size() - 4 * 40);  // fused query_key_value and its bias

  const ModelConfig tiny = ModelConfig::from_json_text(test_model_config("glm4-tiny").dump());
  EXPECT_EQ(tiny.arch, Architecture::kGlm);
  EXPECT_EQ(tiny.eos_token_ids, (std::vector<int64_t>{2, 3, 4}));
  expect_error([] { chatglm_test_model_config(test_model_config("tiny")); }, {"GlmForCausalLM", "Qwen3ForCausalLM"});
  json third = test_model_config("glm4-tiny");
  third["partial_rotary_factor"] = 0.25;
  expect_error([&] { chatglm_test_model_config(third); }, {"partial_rotary_factor must be 0.5"});
}

TEST(TestModel, DualChunkAttentionPresets) {
  const ModelConfig big = ModelConfig::from_json_text(test_model_config("qwen2.5-7b-1m").dump());
  EXPECT_EQ(big.arch, Architecture::kQwen2);
  EXPECT_EQ(big.hidden_size, 3584);
  EXPECT_EQ(big.intermediate_size, 18944);
  EXPECT_EQ(big.num_hidden_layers, 28);
  EXPECT_EQ(big.num_attention_heads, 28);
  EXPECT_EQ(big.num_key_value_heads, 4);
  EXPECT_EQ(big.head_dim, 128);
  EXPECT_EQ(big.vocab_size, 152064);
  EXPECT_EQ(big.max_position_embeddings, 1010000);
  EXPECT_DOUBLE_EQ(big.rope_theta, 1e7);
  EXPECT_TRUE(big.attention_bias);
  EXPECT_FALSE(big.tie_word_embeddings);
  EXPECT_EQ(big.dual_chunk_attention.chunk_size, 262144);
  EXPECT_EQ(big.dual_chunk_attention.local_size, 8192);
  EXPECT_EQ(big.dual_chunk_attention.original_max_position_embeddings, 262144);
  double non_embed = 0;  // the model card: 6.53B non-embedding parameters
  for (const WeightSpec& s : weight_table(big))
    if (s.name != "model.embed_tokens.weight" && s.name != "lm_head.weight") non_embed += static_cast<double>(s.shape.numel());
  EXPECT_NEAR(non_embed / 6.53e9, 1.0, 0.01);

  const ModelConfig tiny = ModelConfig::from_json_text(test_model_config("dca-tiny").dump());
  EXPECT_EQ(tiny.arch, Architecture::kQwen2);
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.dual_chunk_attention.chunk_len(), 48);
  EXPECT_EQ(tiny.dual_chunk_attention.original_max_position_embeddings, 96);
}

// Both layouts of one seed hold the same values: the ChatGLM query_key_value is q_proj, k_proj, v_proj's
// rows, every other tensor its renamed twin, and the loader makes identical engine tensors of both.
TEST(TestModel, ChatGlmLayoutHoldsTheSameWeights) {
  TempDir dir;
  const fs::path hf_dir = dir / "hf", cg_dir = dir / "chatglm";
  json cfg = test_model_config("glm4-tiny");
  cfg["num_hidden_layers"] = 1;
  write_test_model(hf_dir, cfg, 5);
  write_test_model(cg_dir, chatglm_test_model_config(cfg), 5);
  const SafetensorsCheckpoint hf(hf_dir), cg(cg_dir);
  auto bytes = [](const SafetensorsCheckpoint& ck, const std::string& name) {
    const TensorInfo& t = ck.info(name);
    return std::string(static_cast<const char*>(t.data), static_cast<size_t>(t.shape.numel()) * 2);
  };
  const std::string p = "model.layers.0.", q = "transformer.encoder.layers.0.";
  EXPECT_EQ(bytes(cg, q + "self_attention.query_key_value.weight"),
            bytes(hf, p + "self_attn.q_proj.weight") + bytes(hf, p + "self_attn.k_proj.weight") +
                bytes(hf, p + "self_attn.v_proj.weight"));
  EXPECT_EQ(bytes(cg, q + "self_attention.query_key_value.bias"),
            bytes(hf, p + "self_attn.q_proj.bias") + bytes(hf, p + "self_attn.k_proj.bias") +
                bytes(hf, p + "self_attn.v_proj.bias"));
  for (auto [a, b] : {std::pair<std::string, std::string>{"transformer.embedding.word_embeddings.weight",
                                                          "model.embed_tokens.weight"},
                      {q + "input_layernorm.weight", p + "input_layernorm.weight"},
                      {q + "self_attention.dense.weight", p + "self_attn.o_proj.weight"},
                      {q + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight"},
                      {q + "mlp.dense_h_to_4h.weight", p + "mlp.gate_up_proj.weight"},
                      {q + "mlp.dense_4h_to_h.weight", p + "mlp.down_proj.weight"},
                      {"transformer.encoder.final_layernorm.weight", "model.norm.weight"},
                      {"transformer.output_layer.weight", "lm_head.weight"}})
    EXPECT_EQ(bytes(cg, a), bytes(hf, b)) << a;
  EXPECT_EQ(cg.names().size(), 10u);

  const ModelWeights wh = load_weights(hf_dir, ModelConfig::from_model_dir(hf_dir));
  const ModelWeights wc = load_weights(cg_dir, ModelConfig::from_model_dir(cg_dir));
  auto same = [](TensorView a, TensorView b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  };
  EXPECT_TRUE(same(wh.embed_tokens, wc.embed_tokens));
  EXPECT_TRUE(same(wh.layers[0].qkv_proj, wc.layers[0].qkv_proj));
  EXPECT_TRUE(same(wh.layers[0].qkv_bias, wc.layers[0].qkv_bias));
  EXPECT_TRUE(same(wh.layers[0].o_proj, wc.layers[0].o_proj));
  EXPECT_FALSE(wc.layers[0].o_bias.defined());
  EXPECT_TRUE(same(wh.layers[0].gate_up_proj, wc.layers[0].gate_up_proj));
  EXPECT_TRUE(same(wh.layers[0].down_proj, wc.layers[0].down_proj));
  EXPECT_TRUE(same(wh.norm, wc.norm));
  EXPECT_TRUE(same(wh.lm_head, wc.lm_head));
}

TEST(TestModel, HubFileLayout) {
  TempDir dir;
  const json cfg = test_model_config("tiny");
  write_test_model(dir.path(), cfg, 1);
  EXPECT_EQ(json::parse(read_file(dir / "config.json")), cfg);
  const json gen = json::parse(read_file(dir / "generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"], 2);
  EXPECT_EQ(gen["bos_token_id"], 1);
  const ModelConfig c = ModelConfig::from_model_dir(dir.path());
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});

  const std::string f = read_file(dir / "model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(f[static_cast<size_t>(i)]);
  EXPECT_EQ((8 + n) % 8, 0u);  // data 8-byte aligned, header padded with spaces
  const std::string header = f.substr(8, n);
  const json h = json::parse(header);
  EXPECT_EQ(h["__metadata__"], (json{{"format", "pt"}}));
  // Exactly the weight table's tensors, BF16, packed back to back to the end of the file.
  const auto table = weight_table(c);
  EXPECT_EQ(h.size(), table.size() + 1);
  size_t data = 0;
  for (const WeightSpec& s : table) {
    ASSERT_TRUE(h.contains(s.name)) << s.name;
    EXPECT_EQ(h[s.name]["dtype"], "BF16");
    std::vector<int64_t> shape(s.shape.dims.begin(), s.shape.dims.begin() + s.shape.ndim);
    EXPECT_EQ(h[s.name]["shape"].get<std::vector<int64_t>>(), shape);
    data += static_cast<size_t>(s.shape.numel()) * 2;
  }
  EXPECT_FALSE(h.contains("lm_head.weight"));  // tied
  EXPECT_EQ(f.size(), 8 + n + data);
}

TEST(TestModel, DistributionsGivePeakedLogits) {
  TempDir dir;
  json cfg = test_model_config("tiny");
  cfg["architectures"] = {"Qwen2ForCausalLM"};  // has biases
  cfg["model_type"] = "qwen2";
  cfg["tie_word_embeddings"] = false;
  cfg.erase("head_dim");
  write_test_model(dir.path(), cfg, 42);
  const auto ts = read_checkpoint(dir.path());
  auto st = [&](const std::string& name) { return stats(bf16_values(find_tensor(ts, name).bytes)); };

  Stats s = st("model.embed_tokens.weight");  // 512 x 64 samples of N(0, 1)
  EXPECT_NEAR(s.mean, 0.0, 0.02);
  EXPECT_NEAR(s.std, 1.0, 0.02);
  EXPECT_GT(s.max, 3.5);  // normal tails, not uniform
  s = st("model.layers.1.mlp.down_proj.weight");  // fan_in 128
  EXPECT_NEAR(s.std, 1.0 / std::sqrt(128.0), 0.005);
  s = st("model.layers.0.self_attn.q_proj.weight");  // fan_in 64
  EXPECT_NEAR(s.std, 1.0 / 8.0, 0.006);
  s = st("lm_head.weight");
  EXPECT_NEAR(s.std, 1.0 / 8.0, 0.003);
  s = st("model.layers.0.self_attn.q_proj.bias");
  EXPECT_NEAR(s.std, 0.02, 0.005);
  s = st("model.layers.0.input_layernorm.weight");
  EXPECT_GE(s.min, 0.8 - 1e-3);
  EXPECT_LE(s.max, 1.2 + 1e-3);
  EXPECT_GT(s.std, 0.08);  // uniform(0.8, 1.2): std 0.115
  EXPECT_LT(s.std, 0.15);
  // Different tensors differ (the per-name stream is not shared).
  EXPECT_NE(find_tensor(ts, "model.layers.0.mlp.gate_proj.weight").bytes,
            find_tensor(ts, "model.layers.0.mlp.up_proj.weight").bytes);
  EXPECT_NE(find_tensor(ts, "model.layers.0.input_layernorm.weight").bytes,
            find_tensor(ts, "model.layers.1.input_layernorm.weight").bytes);
}

TEST(TestModel, DeterministicForAnyThreadCount) {
  TempDir dir;
  json cfg = test_model_config("tiny");
  cfg["vocab_size"] = 32771;  // embed: 2.2M elements (odd), more than one generation chunk
  cfg["hidden_size"] = 67;
  cfg["num_attention_heads"] = 4;
  write_test_model(dir / "a", cfg, 7, 0, 1);
  write_test_model(dir / "b", cfg, 7, 0, 3);
  write_test_model(dir / "c", cfg, 8, 0, 2);
  const auto a = dir_files(dir / "a");
  EXPECT_EQ(a, dir_files(dir / "b"));
  const auto c = dir_files(dir / "c");
  EXPECT_EQ(a.at("config.json"), c.at("config.json"));
  EXPECT_NE(a.at("model.safetensors"), c.at("model.safetensors"));
  EXPECT_EQ(a.at("model.safetensors").size(), c.at("model.safetensors").size());
  // Rewriting into the same directory gives the same bytes.
  write_test_model(dir / "a", cfg, 7, 0, 2);
  EXPECT_EQ(a, dir_files(dir / "a"));
}

TEST(TestModel, ShardedEqualsUnsharded) {
  TempDir dir;
  const json cfg = test_model_config("tiny");
  write_test_model(dir / "one", cfg, 3);
  write_test_model(dir / "many", cfg, 3, 20000);  // embed (64 KiB) alone, then layers split up
  EXPECT_FALSE(fs::exists(dir / "many" / "model.safetensors"));
  const json index = json::parse(read_file(dir / "many" / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GE(shards.size(), 3u);
  for (size_t i = 1; i <= shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i, shards.size());
    EXPECT_TRUE(shards.count(name)) << name;
  }
  size_t total = 0;
  for (const std::string& s : shards) {
    EXPECT_TRUE(fs::exists(dir / "many" / s)) << s;
    const std::string f = read_file(dir / "many" / s);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(f[static_cast<size_t>(i)]);
    total += f.size() - 8 - n;
    // Each shard but one holding a single oversized tensor stays under the limit.
    if (f.size() - 8 - n > 20000) {
      EXPECT_EQ(json::parse(f.substr(8, n)).size(), 2u) << s;
    }
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), total);

  const ModelConfig c = ModelConfig::from_model_dir(dir / "one");
  const ModelWeights a = load_weights(dir / "one", c);
  const ModelWeights b = load_weights(dir / "many", c);
  auto same = [](const TensorView& x, const TensorView& y) {
    return x.shape() == y.shape() && std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
  };
  EXPECT_TRUE(same(a.embed_tokens, b.embed_tokens));
  EXPECT_TRUE(same(a.norm, b.norm));
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_TRUE(same(a.layers[i].qkv_proj, b.layers[i].qkv_proj));
    EXPECT_TRUE(same(a.layers[i].gate_up_proj, b.layers[i].gate_up_proj));
    EXPECT_TRUE(same(a.layers[i].down_proj, b.layers[i].down_proj));
    EXPECT_TRUE(same(a.layers[i].o_proj, b.layers[i].o_proj));
    EXPECT_TRUE(same(a.layers[i].q_norm, b.layers[i].q_norm));
    EXPECT_TRUE(same(a.layers[i].input_layernorm, b.layers[i].input_layernorm));
  }
  // Switching back to one file removes the shards (else HF and we could see both).
  write_test_model(dir / "many", cfg, 3);
  EXPECT_FALSE(fs::exists(dir / "many" / "model.safetensors.index.json"));
  EXPECT_EQ(dir_files(dir / "many"), dir_files(dir / "one"));
}

TEST(TestModel, RealVocabSize) {
  TempDir dir;
  json cfg = test_model_config("tiny");
  cfg["vocab_size"] = 151936;
  cfg["eos_token_id"] = 151645;
  write_test_model(dir.path(), cfg, 9);
  const ModelConfig c = ModelConfig::from_model_dir(dir.path());
  const ModelWeights w = load_weights(dir.path(), c);
  EXPECT_EQ(w.embed_tokens.dim(0), 151936);
  EXPECT_EQ(w.embed_tokens.dim(1), 64);
  EXPECT_EQ(w.lm_head.data(), w.embed_tokens.data());
  const auto v = bf16_values(bytes_of(w.embed_tokens.data(), w.embed_tokens.nbytes()));
  const Stats s = stats(v);
  EXPECT_NEAR(s.std, 1.0, 0.01);
  EXPECT_NEAR(s.mean, 0.0, 0.01);
}

TEST(TestModel, InvalidConfigFailsClearly) {
  TempDir dir;
  json cfg = test_model_config("tiny");
  cfg["num_attention_heads"] = "four";
  expect_error([&] { write_test_model(dir.path(), cfg, 1); }, {"num_attention_heads", "positive integer"});
  cfg = test_model_config("tiny");
  cfg["architectures"] = {"GPT2LMHeadModel"};
  expect_error([&] { write_test_model(dir.path(), cfg, 1); }, {"GPT2LMHeadModel"});
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
}
