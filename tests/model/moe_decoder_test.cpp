// The decoder's MoE layers on the CPU backend: a prefill through Decoder::forward gives the same logits
// whether the MoE scratch holds the whole step or only a few tokens (the layer then runs its sparse MLP in
// chunks), and the workspace holds the MoE scratch only for MoE models.
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

// Logits of the last of T prompt tokens, with MoE scratch for moe_chunk tokens (0: the default).
std::vector<float> prefill_logits(const std::filesystem::path& dir, int64_t T, int64_t moe_chunk) {
  const ModelConfig cfg = ModelConfig::from_model_dir(dir);
  const RopeTable rope = compute_rope(cfg);
  std::vector<float> inv_freq = rope.inv_freq;
  const TensorView inv(inv_freq.data(), DType::kF32, Shape{static_cast<int64_t>(inv_freq.size())});
  const Decoder model(cfg, load_weights(dir, cfg), inv, rope.attention_scaling);

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
  EXPECT_EQ(ws.moe.capacity(), moe_chunk > 0 ? std::min(moe_chunk, T) : T);

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

TEST(MoeDecoder, ChunkedSparseMlpGivesTheWholeStepsLogits) {
  model_test::TempDir dir;
  write_test_model(dir.path(), test_model_config("qwen3-moe-tiny"), 4);
  const int64_t T = 29;
  const std::vector<float> whole = prefill_logits(dir.path(), T, 0);
  for (int64_t chunk : {1, 4, 7}) {
    const std::vector<float> chunked = prefill_logits(dir.path(), T, chunk);
    double worst = 0;
    for (size_t i = 0; i < whole.size(); ++i) worst = std::max(worst, std::fabs(double{chunked[i]} - whole[i]));
    EXPECT_LT(worst, 1e-5) << "chunks of " << chunk << " tokens";
  }
  // The logits are not trivially equal: a dense model of the same shapes differs.
  double spread = 0;
  for (float x : whole) spread = std::max(spread, std::fabs(double{x} - whole[0]));
  EXPECT_GT(spread, 0.1);
}

TEST(MoeDecoder, OnlyMoeModelsCarryMoeScratch) {
  size_t dense_bytes = 0, moe_bytes = 0;
  const ModelConfig dense = ModelConfig::from_json_text(test_model_config("tiny").dump());
  const ModelConfig moe = ModelConfig::from_json_text(test_model_config("qwen3-moe-tiny").dump());
  const DecoderWorkspace d = Decoder::make_workspace(dense, DType::kF32, nullptr, Device::cpu(), 64, 4, &dense_bytes);
  const DecoderWorkspace m = Decoder::make_workspace(moe, DType::kF32, nullptr, Device::cpu(), 64, 4, &moe_bytes);
  EXPECT_EQ(d.moe.capacity(), 0);
  EXPECT_EQ(m.moe.capacity(), 64);
  EXPECT_EQ(m.moe.rows.shape(), (Shape{64 * 2, 64}));
  EXPECT_EQ(m.moe.act.shape(), (Shape{64 * 2, 32}));
  EXPECT_GT(moe_bytes, dense_bytes);
}
