// load_weights with WeightLoadOptions::shard (each rank reads its slices of the checkpoint) on written test
// checkpoints: per-rank shapes, values taken from the rows and columns the plan names (checked by index
// arithmetic against the whole model's load, not by shard_runs), tied embeddings kept tied, the bias once,
// the sharded MLP of a layer summing to the full one; GLM-4's fused ChatGLM tensors and a bf16 -> f32
// conversion cut the same values as the transformers layout.
#include "nanovllm/model/weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "model_test_util.h"
#include "nanovllm/model/test_model.h"

using namespace nanovllm;

namespace {

float at(const TensorView& t, int64_t row, int64_t col) { return t.data_as<float>()[row * t.dim(1) + col]; }

// Rank `plan.rank`'s slices of the checkpoint in `dir`, converted to f32.
ModelWeights load_shard(const std::filesystem::path& dir, const ModelConfig& cfg, const TensorParallelPlan& plan) {
  WeightLoadOptions opt;
  opt.dtype = DType::kF32;
  opt.shard = &plan;
  return load_weights(dir, cfg, opt);
}

}  // namespace

TEST(TensorParallelWeights, RanksHoldThePlannedRowsAndColumns) {
  model_test::TempDir dir;
  nlohmann::json config = test_model_config("tiny");  // H 64, I 128, 4 heads, 2 KV heads, tied
  config["vocab_size"] = 509;                           // no N > 1 divides it: padded
  write_test_model(dir.path(), config, 7);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  WeightLoadOptions f32;
  f32.dtype = DType::kF32;
  const ModelWeights full = load_weights(dir.path(), cfg, f32);
  const int64_t h = cfg.hidden_size, d = cfg.head_dim, hq = cfg.num_attention_heads, hk = cfg.num_key_value_heads;
  const int64_t inter = cfg.intermediate_size, v = cfg.vocab_size;
  std::vector<float> x(static_cast<size_t>(h));
  for (int64_t k = 0; k < h; ++k) x[k] = std::sin(0.37f * static_cast<float>(k) + 1.f);
  // Full MLP of layer 1: down(silu(gate x) * up x).
  auto mlp = [&](const LayerWeights& l, int64_t i_local) {
    std::vector<float> act(static_cast<size_t>(i_local)), out(static_cast<size_t>(h), 0.f);
    for (int64_t j = 0; j < i_local; ++j) {
      float g = 0.f, u = 0.f;
      for (int64_t k = 0; k < h; ++k) {
        g += at(l.gate_up_proj, j, k) * x[k];
        u += at(l.gate_up_proj, i_local + j, k) * x[k];
      }
      act[j] = g / (1.f + std::exp(-g)) * u;
    }
    for (int64_t o = 0; o < h; ++o)
      for (int64_t j = 0; j < i_local; ++j) out[o] += at(l.down_proj, o, j) * act[j];
    return out;
  };
  const std::vector<float> want = mlp(full.layers[1], inter);

  for (int64_t n : {1, 2, 4}) {
    std::vector<float> sum(static_cast<size_t>(h), 0.f);
    for (int64_t r = 0; r < n; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " rank=" + std::to_string(r));
      const TensorParallelPlan p = shard_for_rank(cfg, r, n);
      const ModelWeights w = load_shard(dir.path(), cfg, p);
      ASSERT_EQ(w.layers.size(), full.layers.size());
      const int64_t hl = hq / n, hkl = n <= hk ? hk / n : 1, vp = (v + n - 1) / n;
      const LayerWeights& l = w.layers[1];
      const LayerWeights& f = full.layers[1];
      EXPECT_EQ(l.qkv_proj.shape(), (Shape{(hl + 2 * hkl) * d, h}));
      EXPECT_EQ(l.o_proj.shape(), (Shape{h, hl * d}));
      EXPECT_EQ(l.gate_up_proj.shape(), (Shape{2 * inter / n, h}));
      EXPECT_EQ(l.down_proj.shape(), (Shape{h, inter / n}));
      EXPECT_EQ(w.embed_tokens.shape(), (Shape{vp, h}));
      EXPECT_EQ(w.lm_head.data(), w.embed_tokens.data()) << "tied embeddings stay one tensor";
      EXPECT_EQ(l.q_norm.shape(), (Shape{d}));
      // Values: q row j of the rank is global q row r*hl*D + j; its k rows are KV head kv0's.
      const int64_t kv0 = n <= hk ? r * hkl : r / (n / hk);
      for (int64_t j : {int64_t{0}, hl * d - 1})
        EXPECT_EQ(at(l.qkv_proj, j, 5), at(f.qkv_proj, r * hl * d + j, 5));
      EXPECT_EQ(at(l.qkv_proj, hl * d, 3), at(f.qkv_proj, hq * d + kv0 * d, 3));                  // first k row
      EXPECT_EQ(at(l.qkv_proj, (hl + hkl) * d, 3), at(f.qkv_proj, (hq + hk + kv0) * d, 3));       // first v row
      EXPECT_EQ(at(l.o_proj, 2, hl * d - 1), at(f.o_proj, 2, (r + 1) * hl * d - 1));
      for (int64_t row = 0; row < vp; ++row) {
        const int64_t id = r * vp + row;
        EXPECT_EQ(at(w.embed_tokens, row, 7), id < v ? at(full.embed_tokens, id, 7) : 0.f) << "row " << row;
      }
      const std::vector<float> part = mlp(l, inter / n);
      for (int64_t k = 0; k < h; ++k) sum[k] += part[k];
    }
    for (int64_t k = 0; k < h; ++k) EXPECT_NEAR(sum[k], want[k], 1e-4f) << "n=" << n << " [" << k << "]";
  }
}

TEST(TensorParallelWeights, UntiedLmHeadIsCutOnItsOwnAndBiasesOnce) {
  model_test::TempDir dir;
  nlohmann::json config = test_model_config("tiny");
  config["tie_word_embeddings"] = false;
  config["attention_bias"] = true;  // Qwen3 with q/k/v and o biases
  write_test_model(dir.path(), config, 8);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  WeightLoadOptions f32;
  f32.dtype = DType::kF32;
  const ModelWeights full = load_weights(dir.path(), cfg, f32);
  ASSERT_NE(full.layers[0].o_bias.data(), nullptr);
  for (int64_t r = 0; r < 2; ++r) {
    const ModelWeights w = load_shard(dir.path(), cfg, shard_for_rank(cfg, r, 2));
    const int64_t vp = cfg.vocab_size / 2;
    ASSERT_NE(w.lm_head.data(), w.embed_tokens.data());
    EXPECT_EQ(at(w.lm_head, vp - 1, 9), at(full.lm_head, r * vp + vp - 1, 9));
    EXPECT_EQ(w.layers[0].qkv_bias.numel(), w.layers[0].qkv_proj.dim(0));
    // o_proj's bias is added once, after the all-reduce: rank 0 holds it, rank 1 none.
    EXPECT_EQ(w.layers[0].o_bias.data() != nullptr, r == 0);
    if (r == 0) {
      EXPECT_EQ(w.layers[0].o_bias.data_as<float>()[3], full.layers[0].o_bias.data_as<float>()[3]);
    }
  }
}

// GLM-4 in THUDM's ChatGLM layout (q/k/v in one tensor, gate/up in one, biases) gives every rank the same
// values as the transformers layout of the same weights, for KV heads split (N = 2) and replicated (N = 4).
TEST(TensorParallelWeights, FusedChatGlmTensorsCutLikeTheTransformersLayout) {
  model_test::TempDir hf_dir, glm_dir;
  nlohmann::json config = test_model_config("glm4-tiny");
  write_test_model(hf_dir.path(), config, 9);
  write_test_model(glm_dir.path(), chatglm_test_model_config(config), 9);
  const ModelConfig hf_cfg = ModelConfig::from_model_dir(hf_dir.path());
  const ModelConfig glm_cfg = ModelConfig::from_model_dir(glm_dir.path());
  for (int64_t n : {2, 4}) {
    if (hf_cfg.num_attention_heads % n != 0) continue;
    for (int64_t r = 0; r < n; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " rank=" + std::to_string(r));
      const ModelWeights a = load_shard(hf_dir.path(), hf_cfg, shard_for_rank(hf_cfg, r, n));
      const ModelWeights b = load_shard(glm_dir.path(), glm_cfg, shard_for_rank(glm_cfg, r, n));
      for (size_t i = 0; i < a.layers.size(); ++i) {
        for (auto [x, y] : {std::pair{&a.layers[i].qkv_proj, &b.layers[i].qkv_proj},
                            {&a.layers[i].qkv_bias, &b.layers[i].qkv_bias},
                            {&a.layers[i].gate_up_proj, &b.layers[i].gate_up_proj},
                            {&a.layers[i].o_proj, &b.layers[i].o_proj}, {&a.layers[i].down_proj, &b.layers[i].down_proj}}) {
          ASSERT_EQ(x->shape(), y->shape());
          EXPECT_EQ(std::memcmp(x->data(), y->data(), x->nbytes()), 0) << "layer " << i;
        }
      }
      EXPECT_EQ(std::memcmp(a.lm_head.data(), b.lm_head.data(), a.lm_head.nbytes()), 0);
    }
  }
}

// The device path: a loader with an upload function converts each piece into its staging buffer and
// uploads it (here a memcpy into host memory, standing in for cudaMemcpy): the same bytes as the direct load.
TEST(TensorParallelWeights, UploadedShardEqualsTheDirectLoad) {
  model_test::TempDir dir;
  nlohmann::json config = test_model_config("tiny");
  config["vocab_size"] = 509;
  write_test_model(dir.path(), config, 10);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  const TensorParallelPlan plan = shard_for_rank(cfg, 1, 2);
  WeightLoadOptions direct;
  direct.dtype = DType::kBF16;
  direct.shard = &plan;
  WeightLoadOptions uploaded = direct;
  size_t bytes = 0;
  uploaded.upload = [&bytes](void* dst, const void* src, size_t n) {
    std::memcpy(dst, src, n);
    bytes += n;
  };
  const ModelWeights a = load_weights(dir.path(), cfg, direct);
  const ModelWeights b = load_weights(dir.path(), cfg, uploaded);
  EXPECT_GT(bytes, size_t{0});
  ASSERT_EQ(a.embed_tokens.shape(), b.embed_tokens.shape());
  EXPECT_EQ(std::memcmp(a.embed_tokens.data(), b.embed_tokens.data(), a.embed_tokens.nbytes()), 0);
  for (size_t i = 0; i < a.layers.size(); ++i)
    for (auto [x, y] : {std::pair{&a.layers[i].qkv_proj, &b.layers[i].qkv_proj},
                        {&a.layers[i].o_proj, &b.layers[i].o_proj}, {&a.layers[i].down_proj, &b.layers[i].down_proj},
                        {&a.layers[i].input_layernorm, &b.layers[i].input_layernorm}}) {
      ASSERT_EQ(x->shape(), y->shape());
      EXPECT_EQ(std::memcmp(x->data(), y->data(), x->nbytes()), 0) << "layer " << i;
    }
}
