// The roofline floors `nanovllm bench` prints (tools/cli/bench_cost.h) on a small config, against counts worked out
// by hand here: one GPU, and one rank's share at tensor-parallel sizes 2 and 4 (KV heads split, then replicated).
#include <gtest/gtest.h>

#include "cli/bench_cost.h"

namespace nanovllm::cli {
namespace {

// h 64, 8 query / 2 KV heads of 16, 2 layers, vocabulary 100; dense: intermediate 128; MoE: 4 experts of 32, 2 a
// token, in both layers.
ModelConfig small_model(bool moe) {
  ModelConfig c;
  c.hidden_size = 64;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_hidden_layers = 2;
  c.vocab_size = 100;
  c.intermediate_size = 128;
  if (moe) {
    c.moe.num_experts = 4;
    c.moe.num_experts_per_tok = 2;
    c.moe.moe_intermediate_size = 32;
  }
  return c;
}

TEST(BenchCost, DenseDecodeBytesAreOneRanksShare) {
  const ModelConfig c = small_model(false);
  // Per layer: q 64x128 + k, v 64x32 each + o 128x64 = 20480 (one GPU); MLP 3 x 64 x 128 = 24576. LM head 6400.
  // Norms: 2 a layer of 64, bf16. KV: 2 layers x K,V x 2 heads x 16 x 2 bytes.
  const ModelCost one(c);
  EXPECT_DOUBLE_EQ(one.weight_bytes_per_step(1), 2.0 * (2 * 20480 + 2 * 24576) + 2.0 * 6400 + 2.0 * 2 * 2 * 64);
  EXPECT_DOUBLE_EQ(one.kv_bytes_per_token, 256);
  // TP 2: 4 query heads, 1 KV head: q 64x64 + k, v 64x16 each + o 64x64 = 10240; MLP halved; LM head halved.
  const ModelCost two(c, 2, 2);
  EXPECT_DOUBLE_EQ(two.weight_bytes_per_step(1), 2.0 * (2 * 10240 + 2 * 12288) + 2.0 * 3200 + 2.0 * 2 * 2 * 64);
  EXPECT_DOUBLE_EQ(two.kv_bytes_per_token, 128);
  // TP 4: 2 query heads; the 2 KV heads are replicated, one a rank: q 64x32 + k, v 64x16 each + o 32x64 = 6144.
  const ModelCost four(c, 2, 4);
  EXPECT_DOUBLE_EQ(four.weight_bytes_per_step(1), 2.0 * (2 * 6144 + 2 * 6144) + 2.0 * 1600 + 2.0 * 2 * 2 * 64);
  EXPECT_DOUBLE_EQ(four.kv_bytes_per_token, 128);
  EXPECT_DOUBLE_EQ(four.attn_flops_per_ctx, 2 * 2 * 4 * 16);
}

TEST(BenchCost, MoeRoutersStayWholeOnEveryRank) {
  const ModelConfig c = small_model(true);
  // Per layer at bs 1: attention 20480, router 4 x 64 = 256 (bf16 whatever the projections), 2 experts of
  // 3 x 64 x 32 = 6144 each; fp8 projections (1 byte) to tell the router's bytes apart.
  const ModelCost one(c, 1);
  EXPECT_DOUBLE_EQ(one.weight_bytes_per_step(1), 1.0 * (2 * 20480 + 2 * 2 * 6144) + 2.0 * (2 * 256 + 6400) +
                                                     2.0 * 2 * 2 * 64);
  // TP 2: attention 10240, each expert's share 3072, the router whole, the LM head halved.
  const ModelCost two(c, 1, 2);
  EXPECT_DOUBLE_EQ(two.weight_bytes_per_step(1), 1.0 * (2 * 10240 + 2 * 2 * 3072) + 2.0 * (2 * 256 + 3200) +
                                                     2.0 * 2 * 2 * 64);
  EXPECT_DOUBLE_EQ(two.experts_read(1), 2);
}

}  // namespace
}  // namespace nanovllm::cli
