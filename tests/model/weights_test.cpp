#include <gtest/gtest.h>

#include "support/expect_error.h"

#include <cstdlib>

#include "model/model_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/test_model.h"
#include "nanovllm/model/weights.h"

using namespace nanovllm;
using namespace model_test;
using nlohmann::json;

namespace {

using nanovllm::testing::expect_error;

// An odd-sized Qwen3: 3 layers, 3 q heads per kv head, head_dim 8, vocab 97.
json odd_qwen3(bool tied) {
  json j = test_model_config("tiny");
  j["hidden_size"] = 40;
  j["intermediate_size"] = 56;
  j["num_hidden_layers"] = 3;
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 8;
  j["vocab_size"] = 97;
  j["tie_word_embeddings"] = tied;
  return j;
}

std::string view_bytes(const TensorView& v) { return bytes_of(v.data(), v.nbytes()); }

std::string rows_bytes(const TensorView& v, int64_t begin, int64_t end) {
  return view_bytes(v.slice_rows(begin, end));
}

// Rewrites dir's checkpoint (read back independently) after `edit`, into `out` with the same config.json.
template <typename Edit>
void rewrite(const fs::path& dir, const fs::path& out, Edit edit) {
  auto ts = read_checkpoint(dir);
  edit(ts);
  fs::create_directories(out);
  fs::copy_file(dir / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  write_safetensors(out / "model.safetensors", ts);
}

std::vector<int64_t> dims(const TensorView& v) {
  std::vector<int64_t> d;
  for (int i = 0; i < v.ndim(); ++i) d.push_back(v.dim(i));
  return d;
}

// Host memory that claims to be a device: checks the loader only touches it through `upload`.
class FakeDeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* p, size_t) override { std::free(p); }
  Device device() const override { return Device::cuda(0); }
};

}  // namespace

TEST(LoadWeights, ShapesAndMergedRowsMatchTheFile) {
  TempDir dir;
  write_test_model(dir.path(), odd_qwen3(/*tied=*/false), 11);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  const ModelWeights w = load_weights(dir.path(), cfg);
  const auto file = read_checkpoint(dir.path());
  const int64_t H = 40, I = 56, V = 97, D = 8, q = 48, kv = 16;

  EXPECT_EQ(dims(w.embed_tokens), (std::vector<int64_t>{V, H}));
  EXPECT_EQ(dims(w.norm), (std::vector<int64_t>{H}));
  EXPECT_EQ(dims(w.lm_head), (std::vector<int64_t>{V, H}));
  EXPECT_NE(w.lm_head.data(), w.embed_tokens.data());
  EXPECT_EQ(view_bytes(w.embed_tokens), find_tensor(file, "model.embed_tokens.weight").bytes);
  EXPECT_EQ(view_bytes(w.lm_head), find_tensor(file, "lm_head.weight").bytes);
  EXPECT_EQ(view_bytes(w.norm), find_tensor(file, "model.norm.weight").bytes);
  ASSERT_EQ(w.layers.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    EXPECT_EQ(l.qkv_proj.dtype(), DType::kBF16);
    EXPECT_EQ(dims(l.qkv_proj), (std::vector<int64_t>{q + 2 * kv, H}));
    EXPECT_EQ(rows_bytes(l.qkv_proj, 0, q), find_tensor(file, p + "self_attn.q_proj.weight").bytes);
    EXPECT_EQ(rows_bytes(l.qkv_proj, q, q + kv), find_tensor(file, p + "self_attn.k_proj.weight").bytes);
    EXPECT_EQ(rows_bytes(l.qkv_proj, q + kv, q + 2 * kv), find_tensor(file, p + "self_attn.v_proj.weight").bytes);
    EXPECT_EQ(dims(l.gate_up_proj), (std::vector<int64_t>{2 * I, H}));
    EXPECT_EQ(rows_bytes(l.gate_up_proj, 0, I), find_tensor(file, p + "mlp.gate_proj.weight").bytes);
    EXPECT_EQ(rows_bytes(l.gate_up_proj, I, 2 * I), find_tensor(file, p + "mlp.up_proj.weight").bytes);
    EXPECT_EQ(dims(l.o_proj), (std::vector<int64_t>{H, q}));
    EXPECT_EQ(view_bytes(l.o_proj), find_tensor(file, p + "self_attn.o_proj.weight").bytes);
    EXPECT_EQ(dims(l.down_proj), (std::vector<int64_t>{H, I}));
    EXPECT_EQ(view_bytes(l.down_proj), find_tensor(file, p + "mlp.down_proj.weight").bytes);
    EXPECT_EQ(view_bytes(l.input_layernorm), find_tensor(file, p + "input_layernorm.weight").bytes);
    EXPECT_EQ(view_bytes(l.post_attention_layernorm), find_tensor(file, p + "post_attention_layernorm.weight").bytes);
    EXPECT_EQ(dims(l.q_norm), (std::vector<int64_t>{D}));
    EXPECT_EQ(view_bytes(l.q_norm), find_tensor(file, p + "self_attn.q_norm.weight").bytes);
    EXPECT_EQ(view_bytes(l.k_norm), find_tensor(file, p + "self_attn.k_norm.weight").bytes);
    EXPECT_FALSE(l.qkv_bias.defined());
    EXPECT_FALSE(l.o_bias.defined());
    // Every owned tensor is 256-byte aligned.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(l.qkv_proj.data()) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(l.k_norm.data()) % 256, 0u);
  }
}

TEST(LoadWeights, TiedLmHeadSharesEmbeddingAndIgnoresStrayCopy) {
  TempDir dir;
  write_test_model(dir / "m", odd_qwen3(/*tied=*/true), 5);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir / "m");
  ModelWeights w = load_weights(dir / "m", cfg);
  EXPECT_EQ(w.lm_head.data(), w.embed_tokens.data());
  EXPECT_EQ(dims(w.lm_head), (std::vector<int64_t>{97, 40}));

  // A tied checkpoint that ships lm_head.weight anyway (and a rotary buffer) still loads.
  rewrite(dir / "m", dir / "extra", [](std::vector<RawTensor>& ts) {
    RawTensor lm = find_tensor(ts, "model.embed_tokens.weight");
    lm.name = "lm_head.weight";
    lm.bytes.assign(lm.bytes.size(), '\x11');
    ts.push_back(lm);
    ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4}, std::string(16, '\x01')});
  });
  w = load_weights(dir / "extra", cfg);
  EXPECT_EQ(w.lm_head.data(), w.embed_tokens.data());
  EXPECT_EQ(view_bytes(w.embed_tokens), find_tensor(read_checkpoint(dir / "m"), "model.embed_tokens.weight").bytes);
}

TEST(LoadWeights, ConvertsDtypes) {
  TempDir dir;
  write_test_model(dir.path(), odd_qwen3(true), 3);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  const auto file = read_checkpoint(dir.path());
  WeightLoadOptions opt;
  opt.dtype = DType::kF32;
  opt.num_threads = 3;
  const ModelWeights w = load_weights(dir.path(), cfg, opt);
  const std::string& qb = find_tensor(file, "model.layers.1.self_attn.q_proj.weight").bytes;
  const std::string& vb = find_tensor(file, "model.layers.1.self_attn.v_proj.weight").bytes;
  const TensorView qkv = w.layers[1].qkv_proj;
  ASSERT_EQ(qkv.dtype(), DType::kF32);
  auto bf16_at = [](const std::string& b, size_t i) {
    uint32_t u = static_cast<uint32_t>(static_cast<unsigned char>(b[2 * i])) |
                 static_cast<uint32_t>(static_cast<unsigned char>(b[2 * i + 1])) << 8;
    u <<= 16;  // bf16 is the top half of an fp32
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (size_t i = 0; i < qb.size() / 2; ++i) ASSERT_EQ(qkv.data_as<float>()[i], bf16_at(qb, i)) << i;
  const size_t v0 = static_cast<size_t>((48 + 16) * 40);
  for (size_t i = 0; i < vb.size() / 2; ++i) ASSERT_EQ(qkv.data_as<float>()[v0 + i], bf16_at(vb, i)) << i;

  opt.dtype = DType::kF16;
  const ModelWeights h = load_weights(dir.path(), cfg, opt);
  ASSERT_EQ(h.norm.dtype(), DType::kF16);
  const std::string& nb = find_tensor(file, "model.norm.weight").bytes;
  for (size_t i = 0; i < 40; ++i) {
    const float want = bf16_at(nb, i);
    const float got = f16_to_f32(h.norm.data_as<uint16_t>()[i]);
    EXPECT_NEAR(got, want, std::abs(want) * 1e-3) << i;
  }
  opt.dtype = DType::kI32;
  expect_error([&] { load_weights(dir.path(), cfg, opt); }, {"I32"});
}

TEST(LoadWeights, KeepsCheckpointDtypesAndUploadsThroughCallback) {
  TempDir dir;
  write_test_model(dir / "m", odd_qwen3(false), 8);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir / "m");
  // The same checkpoint stored as F32: nullopt keeps F32.
  rewrite(dir / "m", dir / "f32", [](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts) {
      std::string out(t.bytes.size() * 2, '\0');
      for (size_t i = 0; i < t.bytes.size() / 2; ++i) {
        out[4 * i + 2] = t.bytes[2 * i];
        out[4 * i + 3] = t.bytes[2 * i + 1];
      }
      t.bytes = out;
      t.dtype = "F32";
    }
  });
  FakeDeviceAllocator dev;
  size_t uploaded = 0;
  WeightLoadOptions opt;
  opt.allocator = &dev;
  expect_error([&] { load_weights(dir / "f32", cfg, opt); }, {"upload"});
  opt.upload = [&](void* dst, const void* src, size_t n) {
    uploaded += n;
    std::memcpy(dst, src, n);
  };
  const ModelWeights w = load_weights(dir / "f32", cfg, opt);
  EXPECT_EQ(w.embed_tokens.device(), Device::cuda(0));
  EXPECT_EQ(w.layers[2].gate_up_proj.dtype(), DType::kF32);
  size_t total = 0;
  for (const WeightSpec& s : weight_table(cfg)) total += static_cast<size_t>(s.shape.numel()) * 4;
  EXPECT_EQ(uploaded, total);
  // Back to bf16 on the way: equal to the original bf16 file.
  opt.dtype = DType::kBF16;
  const ModelWeights b = load_weights(dir / "f32", cfg, opt);
  const auto orig = read_checkpoint(dir / "m");
  EXPECT_EQ(rows_bytes(b.layers[2].gate_up_proj, 56, 112), find_tensor(orig, "model.layers.2.mlp.up_proj.weight").bytes);
  EXPECT_EQ(view_bytes(b.lm_head), find_tensor(orig, "lm_head.weight").bytes);
}

TEST(LoadWeights, Qwen2AndLlamaBiases) {
  TempDir dir;
  json j = odd_qwen3(true);
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j.erase("head_dim");  // 40 / 6 is not whole; Qwen2 derives head_dim
  j["hidden_size"] = 48;
  write_test_model(dir / "qwen2", j, 4);
  ModelConfig cfg = ModelConfig::from_model_dir(dir / "qwen2");
  ModelWeights w = load_weights(dir / "qwen2", cfg);
  auto file = read_checkpoint(dir / "qwen2");
  const LayerWeights& l = w.layers[0];
  EXPECT_FALSE(l.q_norm.defined());
  EXPECT_FALSE(l.k_norm.defined());
  EXPECT_FALSE(l.o_bias.defined());
  ASSERT_TRUE(l.qkv_bias.defined());
  EXPECT_EQ(dims(l.qkv_bias), (std::vector<int64_t>{48 + 2 * 16}));
  EXPECT_EQ(rows_bytes(l.qkv_bias, 0, 48), find_tensor(file, "model.layers.0.self_attn.q_proj.bias").bytes);
  EXPECT_EQ(rows_bytes(l.qkv_bias, 48, 64), find_tensor(file, "model.layers.0.self_attn.k_proj.bias").bytes);
  EXPECT_EQ(rows_bytes(l.qkv_bias, 64, 80), find_tensor(file, "model.layers.0.self_attn.v_proj.bias").bytes);

  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["attention_bias"] = true;
  write_test_model(dir / "llama", j, 4);
  cfg = ModelConfig::from_model_dir(dir / "llama");
  w = load_weights(dir / "llama", cfg);
  file = read_checkpoint(dir / "llama");
  ASSERT_TRUE(w.layers[1].o_bias.defined());
  EXPECT_EQ(view_bytes(w.layers[1].o_bias), find_tensor(file, "model.layers.1.self_attn.o_proj.bias").bytes);
  EXPECT_TRUE(w.layers[1].qkv_bias.defined());
  EXPECT_FALSE(w.layers[1].q_norm.defined());
}

TEST(LoadWeights, CheckpointErrorsNameTensorAndFile) {
  TempDir dir;
  write_test_model(dir / "m", odd_qwen3(false), 1);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir / "m");
  const std::string k = "model.layers.2.self_attn.k_proj.weight";

  rewrite(dir / "m", dir / "missing", [&](std::vector<RawTensor>& ts) {
    ts.erase(std::find_if(ts.begin(), ts.end(), [&](const RawTensor& t) { return t.name == k; }));
  });
  expect_error([&] { load_weights(dir / "missing", cfg); }, {k, "missing", "[16, 40]", (dir / "missing").string()});

  rewrite(dir / "m", dir / "extra", [](std::vector<RawTensor>& ts) {
    ts.push_back({"model.layers.0.mlp.experts.0.weight", "BF16", {2}, std::string(4, '\x3f')});
  });
  expect_error([&] { load_weights(dir / "extra", cfg); },
               {"model.layers.0.mlp.experts.0.weight", "unexpected", "model.safetensors"});

  rewrite(dir / "m", dir / "shape", [&](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == k) t.shape = {40, 16};  // transposed
  });
  expect_error([&] { load_weights(dir / "shape", cfg); }, {k, "[40, 16]", "expected [16, 40]", "model.safetensors"});

  rewrite(dir / "m", dir / "untied", [](std::vector<RawTensor>& ts) {
    ts.erase(std::find_if(ts.begin(), ts.end(), [](const RawTensor& t) { return t.name == "lm_head.weight"; }));
  });
  expect_error([&] { load_weights(dir / "untied", cfg); }, {"lm_head.weight", "missing"});

  rewrite(dir / "m", dir / "dtype", [&](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == k) t.dtype = "I16";
  });
  expect_error([&] { load_weights(dir / "dtype", cfg); }, {k, "I16", "model.safetensors"});

  // A layer more in config.json than in the checkpoint.
  ModelConfig more = cfg;
  more.num_hidden_layers = 4;
  expect_error([&] { load_weights(dir / "m", more); }, {"model.layers.3.", "missing"});
  // Issue 45 (item 9): checked against the checkpoint before anything is sized by it, naming config.json's
  // field; either way round.
  more.num_hidden_layers = 1000;
  expect_error([&] { load_weights(dir / "m", more); },
               {(dir / "m" / "config.json").string(), "'num_hidden_layers' is 1000", "holds 3 layers"});
  ModelConfig fewer = cfg;
  fewer.num_hidden_layers = 2;
  expect_error([&] { load_weights(dir / "m", fewer); }, {"'num_hidden_layers' is 2", "model.layers.2.", "unexpected"});

  // A shard named by the index is gone.
  write_test_model(dir / "sharded", odd_qwen3(false), 1, 4000);
  const auto index = json::parse(read_file(dir / "sharded" / "model.safetensors.index.json"));
  const std::string shard = index["weight_map"][k].get<std::string>();
  EXPECT_NE(shard, index["weight_map"]["model.embed_tokens.weight"].get<std::string>());
  fs::remove(dir / "sharded" / shard);
  expect_error([&] { load_weights(dir / "sharded", cfg); }, {shard, "missing"});
}
