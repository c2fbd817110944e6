// The decoder with block-scaled fp8 projections on the CPU backend (WeightLoadOptions::keep_fp8: every
// projection through ops::linear_fp8, the MLP as gate_up, silu_mul, down) gives the logits of the same model
// with the weights dequantized at load (ops::linear over f32 weights): within 1e-4 (f64 vs f32 sums).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/model_test_util.h"
#include "nanovllm/model/decoder.h"
#include "nanovllm/model/rope.h"
#include "nanovllm/model/test_model.h"
#include "nanovllm/model/weights.h"

using namespace nanovllm;

namespace {

// Logits of the last of T prompt tokens with the weights loaded as `opt` says.
std::vector<float> prefill_logits(const std::filesystem::path& dir, int64_t T, const WeightLoadOptions& opt) {
  const int64_t moe_chunk = 0;
  const ModelConfig cfg = ModelConfig::from_model_dir(dir);
  const RopeTable rope = compute_rope(cfg);
  std::vector<float> inv_freq = rope.inv_freq;
  const TensorView inv(inv_freq.data(), DType::kF32, Shape{static_cast<int64_t>(inv_freq.size())});
  const Decoder model(cfg, load_weights(dir, cfg, opt), inv, rope.attention_scaling);

  const int64_t bs = 16, nb = (T + bs - 1) / bs, hk = cfg.num_key_value_heads, d = cfg.head_dim;
  std::vector<float> k_cache(static_cast<size_t>(cfg.num_hidden_layers * nb * bs * hk * d), 0.f);
  std::vector<float> v_cache(k_cache.size(), 0.f);
  std::vector<LayerKvCache> kv;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const size_t off = static_cast<size_t>(l * nb * bs * hk * d);
    kv.push_back({TensorView(k_cache.data() + off, DType::kF32, Shape{nb, bs, hk, d}),
                  TensorView(v_cache.data() + off, DType::kF32, Shape{nb, bs, hk, d})});
  }
  size_t bytes = 0;
  Decoder::make_workspace(cfg, DType::kF32, nullptr, Device::cpu(), T, 1, &bytes, 1, moe_chunk);
  std::vector<char> arena(bytes + 256);
  const DecoderWorkspace ws =
      Decoder::make_workspace(cfg, DType::kF32, arena.data(), Device::cpu(), T, 1, nullptr, 1, moe_chunk);

  // One sequence of T tokens from an empty cache: ids, positions, slots 0..T-1, blocks 0..nb-1.
  std::vector<int32_t> ids, pos, slots, blocks, cu{0, static_cast<int32_t>(T)}, ctx{static_cast<int32_t>(T)};
  std::vector<int32_t> last{static_cast<int32_t>(T - 1)};
  for (int64_t t = 0; t < T; ++t) {
    ids.push_back(static_cast<int32_t>((t * 37 + 11) % cfg.vocab_size));
    pos.push_back(static_cast<int32_t>(t));
    slots.push_back(static_cast<int32_t>(t));
  }
  for (int64_t b = 0; b < nb; ++b) blocks.push_back(static_cast<int32_t>(b));
  DecoderInputs in;
  in.input_ids = TensorView(ids.data(), DType::kI32, Shape{T});
  in.positions = TensorView(pos.data(), DType::kI32, Shape{T});
  in.sample_rows = TensorView(last.data(), DType::kI32, Shape{1});
  in.attn.num_seqs = 1;
  in.attn.num_tokens = T;
  in.attn.max_query_len = T;
  in.attn.max_context_len = T;
  in.attn.cu_seqlens_q = TensorView(cu.data(), DType::kI32, Shape{2});
  in.attn.context_lens = TensorView(ctx.data(), DType::kI32, Shape{1});
  in.attn.block_tables = TensorView(blocks.data(), DType::kI32, Shape{1, nb});
  in.attn.slot_mapping = TensorView(slots.data(), DType::kI32, Shape{T});
  in.attn.block_size = bs;
  model.forward(in, kv, ws);
  const float* l = ws.logits.data_as<float>();
  return std::vector<float>(l, l + cfg.vocab_size);
}

}  // namespace

TEST(Fp8Decoder, Fp8ProjectionsGiveTheDequantizedModelsLogits) {
  model_test::TempDir dir;
  nlohmann::json config = test_model_config("tiny");
  config["hidden_size"] = 256;
  config["intermediate_size"] = 384;
  config["num_attention_heads"] = 4;
  config["num_key_value_heads"] = 2;
  config["head_dim"] = 64;
  config["quantization_config"] = fp8_quantization_config();
  write_test_model(dir.path(), config, 12);
  WeightLoadOptions fp8;
  fp8.keep_fp8 = true;
  const ModelWeights probe = load_weights(dir.path(), ModelConfig::from_model_dir(dir.path()), fp8);
  ASSERT_EQ(probe.layers[0].gate_up_proj.dtype(), DType::kF8E4M3);
  ASSERT_TRUE(probe.layers[0].qkv_proj_scale.defined());
  const int64_t T = 21;
  const std::vector<float> want = prefill_logits(dir.path(), T, WeightLoadOptions{});
  const std::vector<float> got = prefill_logits(dir.path(), T, fp8);
  double worst = 0, spread = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
    spread = std::max(spread, std::fabs(double{want[i]} - want[0]));
  }
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(spread, 0.1);  // not trivially equal
}
