// Qwen3MoeForCausalLM checkpoints in the hub layout (router mlp.gate, per-expert mlp.experts.E.*_proj):
// the weight table, the stacked expert tensors holding the file's bytes (whole and sharded safetensors),
// clear errors for missing / extra / misshapen expert tensors, and tensor-parallel slices of every expert
// (checked by index arithmetic against the whole load, and by the ranks' expert MLPs summing to the full one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/model_test_util.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/test_model.h"
#include "nanovllm/model/weights.h"
#include "support/expect_error.h"

using namespace nanovllm;
using namespace model_test;
using nlohmann::json;

namespace {

using nanovllm::testing::expect_error;

std::string view_bytes(const TensorView& v) { return bytes_of(v.data(), v.nbytes()); }

// Rows [begin, end) of expert e of a stacked [E, R, C] tensor.
std::string expert_rows(const TensorView& v, int64_t e, int64_t begin, int64_t end) {
  const size_t row = static_cast<size_t>(v.dim(2)) * dtype_size(v.dtype());
  return bytes_of(static_cast<const char*>(v.data()) + (static_cast<size_t>(e * v.dim(1) + begin)) * row,
                  static_cast<size_t>(end - begin) * row);
}

std::string expert_name(int64_t layer, int64_t e, const char* proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." + proj + ".weight";
}

template <typename Edit>
void rewrite(const fs::path& dir, const fs::path& out, Edit edit) {
  auto ts = read_checkpoint(dir);
  edit(ts);
  fs::create_directories(out);
  fs::copy_file(dir / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  write_safetensors(out / "model.safetensors", ts);
}

float at3(const TensorView& t, int64_t e, int64_t r, int64_t c) {
  return t.data_as<float>()[(e * t.dim(1) + r) * t.dim(2) + c];
}

}  // namespace

TEST(MoeWeights, TheTinyPresetIsAQwen3MoeWithDenseAndSparseLayers) {
  const ModelConfig c = ModelConfig::from_json_text(test_model_config("qwen3-moe-tiny").dump());
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.decoder_sparse_step, 2);
  EXPECT_EQ(c.moe.mlp_only_layers, std::vector<int64_t>{3});
  const std::vector<bool> sparse = {false, true, false, false, false, true};
  ASSERT_EQ(c.num_hidden_layers, 6);
  for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(c.is_moe_layer(l), sparse[static_cast<size_t>(l)]) << l;
  // The real shapes.
  const ModelConfig a3b = ModelConfig::from_json_text(test_model_config("qwen3-30b-a3b").dump());
  EXPECT_EQ(a3b.num_hidden_layers, 48);
  EXPECT_EQ(a3b.moe.num_experts, 128);
  EXPECT_EQ(a3b.moe.moe_intermediate_size, 768);
  const ModelConfig a22b = ModelConfig::from_json_text(test_model_config("qwen3-235b-a22b").dump());
  EXPECT_EQ(a22b.num_hidden_layers, 94);
  EXPECT_EQ(a22b.hidden_size, 4096);
  EXPECT_EQ(a22b.moe.moe_intermediate_size, 1536);
  // The table lists the router and every expert's three projections, none of the dense MLP's.
  const std::vector<WeightSpec> table = weight_table(c);
  auto has = [&](const std::string& n) {
    return std::any_of(table.begin(), table.end(), [&](const WeightSpec& w) { return w.name == n; });
  };
  EXPECT_TRUE(has("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(has(expert_name(1, 7, "down_proj")));
  EXPECT_FALSE(has(expert_name(1, 8, "down_proj")));
  EXPECT_FALSE(has("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_TRUE(has("model.layers.3.mlp.gate_proj.weight"));  // mlp_only
  EXPECT_FALSE(has("model.layers.3.mlp.gate.weight"));
}

TEST(MoeWeights, StackedExpertsHoldTheCheckpointBytesWholeAndSharded) {
  TempDir dir;
  json config = test_model_config("qwen3-moe-tiny");
  config["moe_intermediate_size"] = 24;  // odd sizes: Im 24, H 40, 5 experts
  config["hidden_size"] = 40;
  config["head_dim"] = 10;
  config["num_experts"] = 5;
  write_test_model(dir / "one", config, 3);
  write_test_model(dir / "sharded", config, 3, 20000);  // many shards + index
  ASSERT_TRUE(fs::exists(dir / "sharded" / "model.safetensors.index.json"));
  const int64_t E = 5, H = 40, Im = 24;
  for (const char* which : {"one", "sharded"}) {
    SCOPED_TRACE(which);
    const ModelConfig cfg = ModelConfig::from_model_dir(dir / which);
    const ModelWeights w = load_weights(dir / which, cfg);
    const auto file = read_checkpoint(dir / which);
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
      ASSERT_EQ(lw.is_moe(), cfg.is_moe_layer(l)) << l;
      if (!lw.is_moe()) {
        EXPECT_EQ(lw.gate_up_proj.shape(), (Shape{2 * cfg.intermediate_size, H}));
        EXPECT_FALSE(lw.experts_gate_up.defined());
        continue;
      }
      EXPECT_FALSE(lw.gate_up_proj.defined());
      EXPECT_FALSE(lw.down_proj.defined());
      EXPECT_EQ(lw.router.shape(), (Shape{E, H}));
      EXPECT_EQ(view_bytes(lw.router),
                find_tensor(file, "model.layers." + std::to_string(l) + ".mlp.gate.weight").bytes);
      ASSERT_EQ(lw.experts_gate_up.shape(), (Shape{E, 2 * Im, H}));
      ASSERT_EQ(lw.experts_down.shape(), (Shape{E, H, Im}));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(lw.experts_gate_up.data()) % 256, 0u);
      for (int64_t e = 0; e < E; ++e) {
        EXPECT_EQ(expert_rows(lw.experts_gate_up, e, 0, Im), find_tensor(file, expert_name(l, e, "gate_proj")).bytes);
        EXPECT_EQ(expert_rows(lw.experts_gate_up, e, Im, 2 * Im), find_tensor(file, expert_name(l, e, "up_proj")).bytes);
        EXPECT_EQ(expert_rows(lw.experts_down, e, 0, H), find_tensor(file, expert_name(l, e, "down_proj")).bytes);
      }
    }
  }
}

TEST(MoeWeights, ExpertTensorErrorsNameTheTensor) {
  TempDir dir;
  write_test_model(dir / "m", test_model_config("qwen3-moe-tiny"), 1);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir / "m");
  const std::string up = expert_name(5, 6, "up_proj");
  rewrite(dir / "m", dir / "missing", [&](std::vector<RawTensor>& ts) {
    ts.erase(std::find_if(ts.begin(), ts.end(), [&](const RawTensor& t) { return t.name == up; }));
  });
  expect_error([&] { load_weights(dir / "missing", cfg); }, {up, "missing", "[32, 64]", "Qwen3MoeForCausalLM"});
  // A ninth expert: the checkpoint is for another config.
  const std::string extra = expert_name(1, 8, "gate_proj");
  rewrite(dir / "m", dir / "extra", [&](std::vector<RawTensor>& ts) {
    RawTensor t = find_tensor(ts, expert_name(1, 0, "gate_proj"));
    t.name = extra;
    ts.push_back(t);
  });
  expect_error([&] { load_weights(dir / "extra", cfg); }, {extra, "unexpected"});
  // The fused layout of transformers 5's in-memory modules is not what the hub ships.
  rewrite(dir / "m", dir / "fused", [&](std::vector<RawTensor>& ts) {
    ts.push_back({"model.layers.1.mlp.experts.gate_up_proj", "BF16", {8, 64, 64}, std::string(8 * 64 * 64 * 2, '\0')});
  });
  expect_error([&] { load_weights(dir / "fused", cfg); }, {"model.layers.1.mlp.experts.gate_up_proj", "unexpected"});
  const std::string down = expert_name(1, 2, "down_proj");
  rewrite(dir / "m", dir / "shape", [&](std::vector<RawTensor>& ts) {
    for (RawTensor& t : ts)
      if (t.name == down) t.shape = {32, 64};  // transposed
  });
  expect_error([&] { load_weights(dir / "shape", cfg); }, {down, "[32, 64]", "expected [64, 32]"});
  const std::string router = "model.layers.5.mlp.gate.weight";
  rewrite(dir / "m", dir / "router", [&](std::vector<RawTensor>& ts) {
    ts.erase(std::find_if(ts.begin(), ts.end(), [&](const RawTensor& t) { return t.name == router; }));
  });
  expect_error([&] { load_weights(dir / "router", cfg); }, {router, "missing", "[8, 64]"});
}

TEST(MoeWeights, TensorParallelRanksHoldEveryExpertsShare) {
  TempDir dir;
  write_test_model(dir.path(), test_model_config("qwen3-moe-tiny"), 9);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  WeightLoadOptions f32;
  f32.dtype = DType::kF32;
  const ModelWeights full = load_weights(dir.path(), cfg, f32);
  const int64_t E = 8, H = 64, Im = 32, layer = 5;
  const LayerWeights& f = full.layers[layer];
  std::vector<float> x(static_cast<size_t>(H));
  for (int64_t k = 0; k < H; ++k) x[static_cast<size_t>(k)] = std::cos(0.21f * static_cast<float>(k));
  // Expert e's MLP of x with `im` intermediate columns.
  auto expert = [&](const LayerWeights& l, int64_t e, int64_t im) {
    std::vector<float> out(static_cast<size_t>(H), 0.f);
    for (int64_t j = 0; j < im; ++j) {
      float g = 0.f, u = 0.f;
      for (int64_t k = 0; k < H; ++k) {
        g += at3(l.experts_gate_up, e, j, k) * x[static_cast<size_t>(k)];
        u += at3(l.experts_gate_up, e, im + j, k) * x[static_cast<size_t>(k)];
      }
      const float a = g / (1.f + std::exp(-g)) * u;
      for (int64_t o = 0; o < H; ++o) out[static_cast<size_t>(o)] += at3(l.experts_down, e, o, j) * a;
    }
    return out;
  };
  for (int64_t n : {1, 2, 4}) {
    std::vector<std::vector<float>> sums(static_cast<size_t>(E), std::vector<float>(static_cast<size_t>(H), 0.f));
    for (int64_t r = 0; r < n; ++r) {
      SCOPED_TRACE("n=" + std::to_string(n) + " rank=" + std::to_string(r));
      const TensorParallelPlan p = shard_for_rank(cfg, r, n);
      EXPECT_EQ(rank_config(cfg, p).moe.moe_intermediate_size, Im / n);
      WeightLoadOptions opt = f32;
      opt.shard = &p;
      const ModelWeights w = load_weights(dir.path(), cfg, opt);
      const LayerWeights& l = w.layers[layer];
      const int64_t im = Im / n, b = r * im;
      ASSERT_EQ(l.experts_gate_up.shape(), (Shape{E, 2 * im, H}));
      ASSERT_EQ(l.experts_down.shape(), (Shape{E, H, im}));
      ASSERT_EQ(l.router.shape(), (Shape{E, H}));
      EXPECT_EQ(view_bytes(l.router), view_bytes(f.router)) << "the router is replicated";
      for (int64_t e = 0; e < E; ++e) {
        for (int64_t j = 0; j < im; ++j)
          for (int64_t k = 0; k < H; k += 7) {
            ASSERT_EQ(at3(l.experts_gate_up, e, j, k), at3(f.experts_gate_up, e, b + j, k)) << e << " gate " << j;
            ASSERT_EQ(at3(l.experts_gate_up, e, im + j, k), at3(f.experts_gate_up, e, Im + b + j, k)) << e << " up " << j;
          }
        for (int64_t o = 0; o < H; o += 5)
          for (int64_t j = 0; j < im; ++j) ASSERT_EQ(at3(l.experts_down, e, o, j), at3(f.experts_down, e, o, b + j));
        const std::vector<float> part = expert(l, e, im);
        for (int64_t o = 0; o < H; ++o) sums[static_cast<size_t>(e)][static_cast<size_t>(o)] += part[static_cast<size_t>(o)];
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::vector<float> want = expert(f, e, Im);
      for (int64_t o = 0; o < H; ++o)
        EXPECT_NEAR(sums[static_cast<size_t>(e)][static_cast<size_t>(o)], want[static_cast<size_t>(o)], 1e-4f)
            << "n=" << n << " expert " << e << " out " << o;
    }
  }
  // moe_intermediate_size must split evenly.
  expect_error([&] { shard_for_rank(cfg, 0, 3); }, {"tensor_parallel_size 3"});
  json odd = test_model_config("qwen3-moe-tiny");
  odd["moe_intermediate_size"] = 30;
  const ModelConfig oc = ModelConfig::from_json_text(odd.dump());
  expect_error([&] { validate_tensor_parallel(oc, 4); }, {"moe_intermediate_size 30", "tensor_parallel_size 4"});
}
