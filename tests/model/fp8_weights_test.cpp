// Block-scaled FP8 checkpoints through load_weights: the CPU load dequantizes every projection to the values an
// independent reading of the file gives (support/fp8_reference.h), keep_fp8 holds the file's codes and block
// scales (merged like the weights, sliced with them under tensor parallelism, refused clearly off the 128
// grid), --quantization fp8 at load reproduces the fp8 checkpoint of the same seed byte for byte, and bad
// checkpoints are refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model/model_test_util.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/test_model.h"
#include "nanovllm/model/weights.h"
#include "support/expect_error.h"
#include "support/fp8_moe_model.h"
#include "support/fp8_reference.h"

using namespace nanovllm;
using namespace model_test;
using nanovllm::testing::dequantize_by_definition;
using nanovllm::testing::e4m3_by_definition;
using nanovllm::testing::expect_error;
using nlohmann::json;

namespace {

// Qwen3 of `hidden`, `inter`, heads / kv heads of head_dim; fp8 unless `fp8` is false.
json qwen3(int64_t hidden, int64_t inter, int64_t heads, int64_t kv_heads, int64_t head_dim, bool fp8 = true) {
  json j = test_model_config("tiny");
  j["hidden_size"] = hidden;
  j["intermediate_size"] = inter;
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = 97;
  j["tie_word_embeddings"] = false;
  if (fp8) j["quantization_config"] = fp8_quantization_config();
  return j;
}
// Every dimension off the 128 grid: partial blocks everywhere.
json unaligned_fp8() { return qwen3(160, 272, 4, 2, 40); }
// Every projection in whole 128 x 128 blocks.
json aligned_fp8() { return qwen3(256, 384, 4, 2, 64); }

// The f32 values of checkpoint tensors `names` (fp8 by definition, or raw), concatenated by rows.
std::vector<float> expected_rows(const std::vector<RawTensor>& ckpt, const std::vector<std::string>& names) {
  std::vector<float> out;
  for (const std::string& n : names) {
    const RawTensor& t = find_tensor(ckpt, n);
    const std::vector<float> v = dequantize_by_definition(t, find_tensor(ckpt, n + "_scale_inv"));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<float> values(const TensorView& v) {
  EXPECT_EQ(v.dtype(), DType::kF32);
  return std::vector<float>(v.data_as<float>(), v.data_as<float>() + v.numel());
}

// The projections of layer l as checkpoint names: qkv, o, gate_up, down.
std::vector<std::vector<std::string>> projection_parts(int l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  return {{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
          {p + "self_attn.o_proj.weight"},
          {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
          {p + "mlp.down_proj.weight"}};
}
std::vector<const TensorView*> projections(const LayerWeights& l) {
  return {&l.qkv_proj, &l.o_proj, &l.gate_up_proj, &l.down_proj};
}
std::vector<const TensorView*> projection_scales(const LayerWeights& l) {
  return {&l.qkv_proj_scale, &l.o_proj_scale, &l.gate_up_proj_scale, &l.down_proj_scale};
}

// A kept-fp8 weight and its block scales as f32 values, decoded by definition.
std::vector<float> dequantize_view(const TensorView& codes, const TensorView& scale) {
  EXPECT_EQ(codes.dtype(), DType::kF8E4M3);
  EXPECT_EQ(scale.dtype(), DType::kF32);
  const RawTensor c{"w", "F8_E4M3", {codes.dim(0), codes.dim(1)}, bytes_of(codes.data(), codes.nbytes())};
  const RawTensor s{"s", "F32", {scale.dim(0), scale.dim(1)}, bytes_of(scale.data(), scale.nbytes())};
  return dequantize_by_definition(c, s);
}

// Rows (kRows) or columns (kColumns) `ranges` of a row-major [rows, cols] tensor.
std::vector<float> cut(const std::vector<float>& full, int64_t cols, const ShardSlice& slice) {
  std::vector<float> out;
  const int64_t rows = static_cast<int64_t>(full.size()) / cols;
  if (slice.axis == ShardSlice::Axis::kRows) {
    for (const IndexRange& r : slice.ranges)
      out.insert(out.end(), full.begin() + r.begin * cols, full.begin() + r.end * cols);
    return out;
  }
  for (int64_t row = 0; row < rows; ++row)
    for (const IndexRange& r : slice.ranges)
      out.insert(out.end(), full.begin() + row * cols + r.begin, full.begin() + row * cols + r.end);
  return out;
}

WeightLoadOptions kept() {
  WeightLoadOptions o;
  o.keep_fp8 = true;
  return o;
}

}  // namespace

TEST(Fp8Block, QuantizationIsWithinHalfAStepOfEachBlocksGrid) {
  const int64_t rows = 200, cols = 300;  // partial blocks on both edges
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)  // block (1, 2) all zero; the others spread over 2^-6 .. 2^6
      w[r * cols + c] = (r >= 128 && c >= 256) ? 0.0f : normal(rng) * std::ldexp(1.0f, static_cast<int>(c % 13) - 6);
  std::vector<uint8_t> q(w.size());
  std::vector<float> scale(2 * 3);
  quantize_fp8_blocks(w.data(), rows, cols, q.data(), scale.data());
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0.0f;
      for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      EXPECT_EQ(scale[br * 3 + bc], amax > 0 ? amax / 448.0f : 1.0f) << br << "," << bc;
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double s = scale[(r / 128) * 3 + c / 128], x = w[r * cols + c];
      const double v = e4m3_by_definition(q[r * cols + c]) * s;
      // e4m3 keeps 3 mantissa bits: half a step is 2^-4 relative, or 2^-10 s among the subnormals.
      ASSERT_LE(std::fabs(v - x), std::max(std::fabs(x) * 0.0625, s * std::ldexp(1.0, -10)) * (1 + 1e-6)) << r << "," << c;
    }
  // dequantize_fp8_run over runs that cross rows and blocks: one f32 product each.
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {127, 300}, {299, 2}, {38000, 22000}}) {
    std::vector<float> out(static_cast<size_t>(count));
    dequantize_fp8_run(q.data(), scale.data(), cols, first, count, out.data());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t e = first + i, r = e / cols, c = e % cols;
      ASSERT_EQ(out[i], static_cast<float>(e4m3_by_definition(q[e]) * scale[(r / 128) * 3 + c / 128])) << e;
    }
  }
}

TEST(Fp8Weights, CpuLoadDequantizesEveryProjectionLikeTheFileSays) {
  TempDir dir;
  const json config = unaligned_fp8();
  write_test_model(dir / "one", config, 5);
  write_test_model(dir / "sharded", config, 5, 30000);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir / "one");
  ASSERT_TRUE(cfg.quantization.fp8());
  const std::vector<RawTensor> ckpt = read_checkpoint(dir / "one");
  EXPECT_EQ(find_tensor(ckpt, "model.layers.0.self_attn.q_proj.weight").dtype, "F8_E4M3");
  EXPECT_EQ(find_tensor(ckpt, "model.layers.0.self_attn.q_proj.weight_scale_inv").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(find_tensor(ckpt, "model.embed_tokens.weight").dtype, "BF16");  // kept bf16, as the hub's
  EXPECT_EQ(find_tensor(ckpt, "lm_head.weight").dtype, "BF16");
  for (const char* sub : {"one", "sharded"}) {
    const ModelWeights w = load_weights(dir / sub, cfg);
    for (int l = 0; l < cfg.num_hidden_layers; ++l) {
      const auto parts = projection_parts(l);
      const auto views = projections(w.layers[l]);
      for (size_t k = 0; k < parts.size(); ++k) {
        EXPECT_EQ(values(*views[k]), expected_rows(ckpt, parts[k])) << sub << " " << parts[k][0];
        EXPECT_FALSE(projection_scales(w.layers[l])[k]->defined());
      }
    }
    EXPECT_EQ(w.embed_tokens.dtype(), DType::kBF16);
    EXPECT_EQ(w.layers[0].input_layernorm.dtype(), DType::kBF16);
    EXPECT_EQ(w.lm_head.dtype(), DType::kBF16);
  }
  WeightLoadOptions bf16;  // what the CUDA backend asks for under --quantization none
  bf16.dtype = DType::kBF16;
  const ModelWeights b = load_weights(dir / "one", cfg, bf16);
  const std::vector<float> want = expected_rows(ckpt, projection_parts(1)[3]);
  ASSERT_EQ(b.layers[1].down_proj.dtype(), DType::kBF16);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(b.layers[1].down_proj.data_as<uint16_t>()[i], f32_to_bf16(want[i])) << i;
}

TEST(Fp8Weights, KeptFp8HoldsTheFilesCodesAndBlockScalesMergedByRows) {
  TempDir dir;
  write_test_model(dir.path(), aligned_fp8(), 6);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  const std::vector<RawTensor> ckpt = read_checkpoint(dir.path());
  const ModelWeights w = load_weights(dir.path(), cfg, kept());
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const auto parts = projection_parts(l);
    for (size_t k = 0; k < parts.size(); ++k) {
      const TensorView& codes = *projections(w.layers[l])[k];
      const TensorView& scale = *projection_scales(w.layers[l])[k];
      std::string want_codes, want_scales;
      for (const std::string& n : parts[k]) {
        want_codes += find_tensor(ckpt, n).bytes;
        want_scales += find_tensor(ckpt, n + "_scale_inv").bytes;  // F32 in make-test-model checkpoints
      }
      ASSERT_EQ(codes.dtype(), DType::kF8E4M3) << parts[k][0];
      EXPECT_EQ(bytes_of(codes.data(), codes.nbytes()), want_codes) << parts[k][0];
      ASSERT_TRUE(scale.defined()) << parts[k][0];
      EXPECT_EQ(scale.shape(), fp8_scale_shape(codes.shape())) << parts[k][0];
      EXPECT_EQ(bytes_of(scale.data(), scale.nbytes()), want_scales) << parts[k][0];
    }
  }
  EXPECT_EQ(w.embed_tokens.dtype(), DType::kBF16);
  EXPECT_EQ(w.lm_head.dtype(), DType::kBF16);
  // Off the 128 grid the kernels cannot take it: refused, naming the tensor and the way out.
  write_test_model(dir / "odd", unaligned_fp8(), 6);
  expect_error([&] { load_weights(dir / "odd", ModelConfig::from_model_dir(dir / "odd"), kept()); },
               {"q_proj.weight", "[160, 160]", "multiples of 128", "--quantization none"});
}

TEST(Fp8Weights, TensorParallelRanksCarryTheBlockScalesOfTheirSlices) {
  TempDir dir;
  write_test_model(dir.path(), qwen3(256, 512, 4, 2, 128), 7);  // 2 ranks: 2 q heads, 1 kv head, 256 of I each
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  const ModelWeights full = load_weights(dir.path(), cfg);  // dequantized, whole
  for (int64_t rank = 0; rank < 2; ++rank) {
    const TensorParallelPlan plan = shard_for_rank(cfg, rank, 2);
    WeightLoadOptions opt = kept();
    opt.shard = &plan;
    const ModelWeights mine = load_weights(dir.path(), cfg, opt);
    WeightLoadOptions deq;
    deq.shard = &plan;
    const ModelWeights mine_f32 = load_weights(dir.path(), cfg, deq);
    const ShardSlice* slices[] = {&plan.qkv_proj, &plan.o_proj, &plan.gate_up_proj, &plan.down_proj};
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      for (size_t k = 0; k < 4; ++k) {
        const TensorView& whole = *projections(full.layers[l])[k];
        const std::vector<float> want = cut(values(whole), whole.dim(1), *slices[k]);
        const std::vector<float> got = dequantize_view(*projections(mine.layers[l])[k], *projection_scales(mine.layers[l])[k]);
        EXPECT_EQ(got, want) << "rank " << rank << " layer " << l << " projection " << k;
        EXPECT_EQ(values(*projections(mine_f32.layers[l])[k]), want) << "rank " << rank << " layer " << l;
      }
  }
  // I = 384 over 2 ranks: 192 rows of gate_proj each, which cuts a 128-block. Kept fp8: refused; dequantized:
  // any cut works.
  write_test_model(dir / "odd", qwen3(256, 384, 4, 2, 128), 7);
  const ModelConfig odd = ModelConfig::from_model_dir(dir / "odd");
  const TensorParallelPlan plan = shard_for_rank(odd, 1, 2);
  WeightLoadOptions opt = kept();
  opt.shard = &plan;
  expect_error([&] { load_weights(dir / "odd", odd, opt); },
               {"rows [192, 384)", "gate_proj.weight", "128", "--quantization none"});
  opt.keep_fp8 = false;
  const ModelWeights ok = load_weights(dir / "odd", odd, opt);
  const ModelWeights odd_full = load_weights(dir / "odd", odd);
  EXPECT_EQ(values(ok.layers[1].gate_up_proj), cut(values(odd_full.layers[1].gate_up_proj), 256, plan.gate_up_proj));
}

TEST(Fp8Weights, QuantizingAtLoadReproducesTheFp8CheckpointOfTheSameSeed) {
  TempDir dir;
  for (const json& fp8_config : {aligned_fp8(), unaligned_fp8()}) {
    json bf16_config = fp8_config;
    bf16_config.erase("quantization_config");
    write_test_model(dir / "fp8", fp8_config, 9);
    write_test_model(dir / "bf16", bf16_config, 9);
    const ModelConfig fp8_cfg = ModelConfig::from_model_dir(dir / "fp8");
    const ModelConfig bf16_cfg = ModelConfig::from_model_dir(dir / "bf16");
    ASSERT_FALSE(bf16_cfg.quantization.fp8());
    WeightLoadOptions quantize;
    quantize.quantize_fp8 = true;
    const ModelWeights a = load_weights(dir / "fp8", fp8_cfg);
    const ModelWeights b = load_weights(dir / "bf16", bf16_cfg, quantize);
    for (int l = 0; l < fp8_cfg.num_hidden_layers; ++l)
      for (size_t k = 0; k < 4; ++k)
        EXPECT_EQ(values(*projections(a.layers[l])[k]), values(*projections(b.layers[l])[k])) << l << " " << k;
    if (fp8_config == unaligned_fp8()) continue;
    quantize.keep_fp8 = true;
    const ModelWeights kc = load_weights(dir / "fp8", fp8_cfg, kept());
    const ModelWeights kq = load_weights(dir / "bf16", bf16_cfg, quantize);
    for (int l = 0; l < fp8_cfg.num_hidden_layers; ++l)
      for (size_t k = 0; k < 4; ++k) {
        const TensorView &x = *projections(kc.layers[l])[k], &y = *projections(kq.layers[l])[k];
        const TensorView &xs = *projection_scales(kc.layers[l])[k], &ys = *projection_scales(kq.layers[l])[k];
        EXPECT_EQ(bytes_of(x.data(), x.nbytes()), bytes_of(y.data(), y.nbytes())) << l << " " << k;
        EXPECT_EQ(bytes_of(xs.data(), xs.nbytes()), bytes_of(ys.data(), ys.nbytes())) << l << " " << k;
      }
    EXPECT_EQ(kq.embed_tokens.dtype(), DType::kBF16);  // never quantized
    WeightLoadOptions keep_only = kept();              // a bf16 checkpoint without quantize_fp8: stays dense
    EXPECT_EQ(load_weights(dir / "bf16", bf16_cfg, keep_only).layers[0].qkv_proj.dtype(), DType::kBF16);
  }
}

TEST(Fp8Weights, BadCheckpointsAreRefusedNamingTheTensor) {
  TempDir dir;
  write_test_model(dir / "m", unaligned_fp8(), 1);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  auto rewrite = [&](auto edit, const json& config) {
    auto ts = read_checkpoint(dir / "m");
    edit(ts);
    fs::remove_all(dir / "bad");
    fs::create_directories(dir / "bad");
    write_file(dir / "bad" / "config.json", config.dump());
    write_safetensors(dir / "bad" / "model.safetensors", ts);
    return ModelConfig::from_model_dir(dir / "bad");
  };
  auto find = [](std::vector<RawTensor>& ts, const std::string& n) -> RawTensor& {
    for (RawTensor& t : ts)
      if (t.name == n) return t;
    throw std::runtime_error("no " + n);
  };
  auto expect_bad = [&](auto edit, std::initializer_list<std::string> parts, const json& config = unaligned_fp8()) {
    const ModelConfig c = rewrite(edit, config);
    expect_error([&] { load_weights(dir / "bad", c); }, parts);
  };
  expect_bad([&](auto& ts) { std::erase_if(ts, [&](const RawTensor& t) { return t.name == q + "_scale_inv"; }); },
             {"missing tensor", q + "_scale_inv", "[2, 2]", "block scales"});
  expect_bad([&](auto& ts) { find(ts, q + "_scale_inv").shape = {4, 1}; }, {q + "_scale_inv", "[4, 1]", "[2, 2]"});
  expect_bad([&](auto& ts) { find(ts, q + "_scale_inv").dtype = "F8_E4M3"; find(ts, q + "_scale_inv").bytes.resize(4); },
             {q + "_scale_inv", "F8_E4M3", "F32, BF16 or F16"});
  expect_bad([&](auto& ts) { find(ts, q).dtype = "BF16"; find(ts, q).bytes += find(ts, q).bytes; },
             {q, "BF16", "quantization_config", "modules_to_not_convert"});
  expect_bad([&](auto& ts) {
    RawTensor& e = find(ts, "model.embed_tokens.weight");
    e.dtype = "F8_E4M3";
    e.bytes.resize(e.bytes.size() / 2);
  }, {"model.embed_tokens.weight", "F8_E4M3", "only projection weights"});
  expect_bad([&](auto& ts) {
    float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(find(ts, q + "_scale_inv").bytes.data() + 12, &nan, 4);
  }, {q + "_scale_inv", "nan", "block [1, 1]", "finite"});
  json plain = unaligned_fp8();
  plain.erase("quantization_config");
  expect_bad([](auto&) {}, {"q_proj.weight", "F8_E4M3", "no block-scaled fp8 quantization_config"}, plain);
  json skip = unaligned_fp8();
  skip["quantization_config"]["modules_to_not_convert"] = {"layers.1.mlp"};
  expect_bad([](auto&) {}, {"model.layers.1.mlp.gate_proj.weight", "F8_E4M3", "modules_to_not_convert lists it"}, skip);
  // A checkpoint that keeps the listed modules in bf16 loads, with the rest fp8.
  const ModelConfig mixed = rewrite([&](auto& ts) {
    for (const char* n : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string name = std::string("model.layers.1.mlp.") + n + ".weight";
      RawTensor& t = find(ts, name);
      const std::vector<float> v = dequantize_by_definition(t, find(ts, name + "_scale_inv"));
      t.dtype = "F32";
      t.bytes = std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
      std::erase_if(ts, [&](const RawTensor& x) { return x.name == name + "_scale_inv"; });
    }
  }, skip);
  const ModelWeights w = load_weights(dir / "bad", mixed);
  EXPECT_EQ(values(w.layers[1].down_proj), expected_rows(read_checkpoint(dir / "m"), projection_parts(1)[3]));
}

namespace {

// A Qwen3-MoE in whole 128 x 128 blocks: hidden 256, 2 heads of 128 (1 KV head), dense layers' I 256, 4 layers of
// which 1 and 3 are sparse, 5 experts (top 2) of moe_intermediate_size `moe_inter`; fp8 unless `fp8` is false.
json moe_fp8(int64_t moe_inter, bool fp8 = true) {
  json j = nanovllm::testing::moe_in_whole_fp8_blocks();
  j["mlp_only_layers"] = json::array();
  j["num_experts"] = 5;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = moe_inter;
  j["vocab_size"] = 97;
  if (fp8) j["quantization_config"] = fp8_quantization_config();
  return j;
}

// Expert e's checkpoint names in layer l: gate, up, down.
std::vector<std::string> expert_parts(int l, int64_t e) {
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
  return {p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"};
}

// Stacked kept-fp8 experts [E, R, C] with their scales [E, R / 128, C / 128], dequantized by definition: the
// experts' blocks stack by rows, so [E R, C] with [E R / 128, C / 128] decodes as one weight.
std::vector<float> dequantize_stacked(const TensorView& codes, const TensorView& scale) {
  EXPECT_EQ(codes.ndim(), 3);
  EXPECT_EQ(scale.shape(), (Shape{codes.dim(0), codes.dim(1) / 128, codes.dim(2) / 128}));
  return dequantize_view(codes.reshape({codes.dim(0) * codes.dim(1), codes.dim(2)}),
                         scale.reshape({scale.dim(0) * scale.dim(1), scale.dim(2)}));
}

}  // namespace

TEST(Fp8Weights, KeptFp8MoeExpertsHoldTheFilesCodesAndStackedBlockScales) {
  TempDir dir;
  write_test_model(dir / "fp8", moe_fp8(256), 11);
  write_test_model(dir / "bf16", moe_fp8(256, false), 11);
  const ModelConfig cfg = ModelConfig::from_model_dir(dir / "fp8");
  const std::vector<RawTensor> ckpt = read_checkpoint(dir / "fp8");
  const ModelWeights w = load_weights(dir / "fp8", cfg, kept());
  WeightLoadOptions quantize = kept();  // --quantization fp8 on the bf16 checkpoint of the same seed
  quantize.quantize_fp8 = true;
  const ModelWeights q = load_weights(dir / "bf16", ModelConfig::from_model_dir(dir / "bf16"), quantize);
  const int64_t E = 5, Im = 256, H = 256;
  for (int l : {1, 3}) {
    const LayerWeights& L = w.layers[l];
    ASSERT_TRUE(L.is_moe());
    EXPECT_EQ(L.router.dtype(), DType::kBF16);  // the router stays unquantized
    ASSERT_EQ(L.experts_gate_up.dtype(), DType::kF8E4M3);
    ASSERT_EQ(L.experts_down.dtype(), DType::kF8E4M3);
    EXPECT_EQ(L.experts_gate_up.shape(), (Shape{E, 2 * Im, H}));
    EXPECT_EQ(L.experts_down.shape(), (Shape{E, H, Im}));
    ASSERT_EQ(L.experts_gate_up_scale.shape(), (Shape{E, 2 * Im / 128, H / 128}));
    ASSERT_EQ(L.experts_down_scale.shape(), (Shape{E, H / 128, Im / 128}));
    // Per expert: its gate codes then its up codes; its gate blocks' scales then its up blocks'.
    std::string gate_up, gate_up_scales, down, down_scales;
    for (int64_t e = 0; e < E; ++e) {
      const auto parts = expert_parts(l, e);
      for (size_t i = 0; i < 2; ++i) {
        gate_up += find_tensor(ckpt, parts[i]).bytes;
        gate_up_scales += find_tensor(ckpt, parts[i] + "_scale_inv").bytes;
      }
      down += find_tensor(ckpt, parts[2]).bytes;
      down_scales += find_tensor(ckpt, parts[2] + "_scale_inv").bytes;
    }
    EXPECT_EQ(bytes_of(L.experts_gate_up.data(), L.experts_gate_up.nbytes()), gate_up) << l;
    EXPECT_EQ(bytes_of(L.experts_gate_up_scale.data(), L.experts_gate_up_scale.nbytes()), gate_up_scales) << l;
    EXPECT_EQ(bytes_of(L.experts_down.data(), L.experts_down.nbytes()), down) << l;
    EXPECT_EQ(bytes_of(L.experts_down_scale.data(), L.experts_down_scale.nbytes()), down_scales) << l;
    // Quantizing the bf16 checkpoint at load gives the same bytes.
    const LayerWeights& Q = q.layers[l];
    for (auto [a, b] : {std::pair{&L.experts_gate_up, &Q.experts_gate_up}, {&L.experts_down, &Q.experts_down},
                        {&L.experts_gate_up_scale, &Q.experts_gate_up_scale},
                        {&L.experts_down_scale, &Q.experts_down_scale}}) {
      ASSERT_EQ(a->shape(), b->shape()) << l;
      EXPECT_EQ(bytes_of(a->data(), a->nbytes()), bytes_of(b->data(), b->nbytes())) << l;
    }
  }
  EXPECT_EQ(w.layers[0].gate_up_proj.dtype(), DType::kF8E4M3);  // the dense layers as before
  EXPECT_FALSE(w.layers[0].experts_gate_up_scale.defined());
  // Without keep_fp8 (the CPU backend) the experts are the dequantized f32 values, scales undefined.
  const ModelWeights f = load_weights(dir / "fp8", cfg);
  EXPECT_EQ(f.layers[1].experts_gate_up.dtype(), DType::kF32);
  EXPECT_FALSE(f.layers[1].experts_gate_up_scale.defined());
  EXPECT_EQ(values(f.layers[1].experts_gate_up), dequantize_stacked(w.layers[1].experts_gate_up,
                                                                    w.layers[1].experts_gate_up_scale));
  EXPECT_EQ(values(f.layers[3].experts_down), dequantize_stacked(w.layers[3].experts_down,
                                                                 w.layers[3].experts_down_scale));
}

TEST(Fp8Weights, TensorParallelRanksCarryTheirExpertSlicesBlockScales) {
  TempDir dir;
  write_test_model(dir.path(), moe_fp8(256), 12);  // 2 ranks: 128 of every expert's 256 intermediate columns
  const ModelConfig cfg = ModelConfig::from_model_dir(dir.path());
  const ModelWeights full = load_weights(dir.path(), cfg);  // dequantized, whole
  for (int64_t rank = 0; rank < 2; ++rank) {
    const TensorParallelPlan plan = shard_for_rank(cfg, rank, 2);
    WeightLoadOptions opt = kept();
    opt.shard = &plan;
    const ModelWeights mine = load_weights(dir.path(), cfg, opt);
    for (int l : {1, 3}) {
      const LayerWeights &M = mine.layers[l], &F = full.layers[l];
      ASSERT_EQ(M.experts_gate_up.dtype(), DType::kF8E4M3);
      EXPECT_EQ(M.experts_gate_up.shape(), (Shape{5, 256, 256}));
      EXPECT_EQ(M.experts_down.shape(), (Shape{5, 256, 128}));
      EXPECT_EQ(dequantize_stacked(M.experts_gate_up, M.experts_gate_up_scale),
                cut(values(F.experts_gate_up), 256, plan.experts_gate_up))
          << "rank " << rank << " layer " << l;
      EXPECT_EQ(dequantize_stacked(M.experts_down, M.experts_down_scale),
                cut(values(F.experts_down), 256, plan.experts_down))
          << "rank " << rank << " layer " << l;
    }
  }
}

TEST(Fp8Weights, MoeExpertsOffTheBlockGridFallBackToDequantized) {
  TempDir dir;
  // moe_intermediate_size 384 over 2 ranks: 192 columns each, which cut a block; 192 on one rank: a partial block.
  write_test_model(dir / "tp", moe_fp8(384), 13);
  write_test_model(dir / "one", moe_fp8(192), 13);
  const ModelConfig tp = ModelConfig::from_model_dir(dir / "tp");
  const ModelWeights full = load_weights(dir / "tp", tp);
  for (int64_t rank = 0; rank < 2; ++rank) {
    const TensorParallelPlan plan = shard_for_rank(tp, rank, 2);
    WeightLoadOptions opt = kept();
    opt.dtype = DType::kBF16;  // what the CUDA backend asks for
    opt.shard = &plan;
    const ModelWeights mine = load_weights(dir / "tp", tp, opt);  // loads (a warning, no error)
    const LayerWeights& M = mine.layers[1];
    ASSERT_EQ(M.experts_gate_up.dtype(), DType::kBF16) << "rank " << rank;
    ASSERT_EQ(M.experts_down.dtype(), DType::kBF16);
    EXPECT_FALSE(M.experts_gate_up_scale.defined());
    EXPECT_FALSE(M.experts_down_scale.defined());
    EXPECT_EQ(M.experts_gate_up.shape(), (Shape{5, 384, 256}));
    const std::vector<float> want = cut(values(full.layers[1].experts_gate_up), 256, plan.experts_gate_up);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(M.experts_gate_up.data_as<uint16_t>()[i], f32_to_bf16(want[i])) << "rank " << rank << " " << i;
    EXPECT_EQ(mine.layers[0].qkv_proj.dtype(), DType::kF8E4M3);  // the rest stays fp8
    EXPECT_EQ(mine.layers[0].down_proj.dtype(), DType::kF8E4M3);
  }
  const ModelConfig one = ModelConfig::from_model_dir(dir / "one");
  const ModelWeights w = load_weights(dir / "one", one, kept());
  EXPECT_EQ(w.layers[3].experts_down.dtype(), DType::kF32);  // dtype unset: the dequantized f32 values
  EXPECT_FALSE(w.layers[3].experts_down_scale.defined());
  EXPECT_EQ(values(w.layers[3].experts_down), values(load_weights(dir / "one", one).layers[3].experts_down));
  EXPECT_EQ(w.layers[3].o_proj.dtype(), DType::kF8E4M3);
}
