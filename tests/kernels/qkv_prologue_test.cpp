// qkv_prologue against a double reference of HF's Qwen3 attention prologue: per-head RMSNorm of q/k,
// rotate_half RoPE with the fp32 angle float(pos) * inv_freq[i] (as HF forms it), cos/sin scaled by
// attention_scaling; K/V stored at slot_mapping, slot -1 skipped, every other slot untouched.
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

struct Case {
  int64_t T, Hq, Hk, D;
  bool norms;
  float scaling;
  DType cache_dtype;
};

void run(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t T = c.T, Hq = c.Hq, Hk = c.Hk, D = c.D, half = D / 2, BS = 16;
  const int64_t NB = (T + BS - 1) / BS + 2, W = (Hq + 2 * Hk) * D;
  const double eps = 1e-6;
  HostTensor qkv = test::random_tensor(DType::kF32, {T, W}, rng, -2.0f, 2.0f);
  HostTensor qn = test::random_tensor(DType::kF32, {D}, rng, 0.5f, 1.5f);
  HostTensor kn = test::random_tensor(DType::kBF16, {D}, rng, 0.5f, 1.5f);
  HostTensor inv(DType::kF32, {half});
  for (int64_t i = 0; i < half; ++i)  // any positive frequencies will do; these are the default table's
    inv.set(i, static_cast<float>(std::pow(1e6, -2.0 * static_cast<double>(i) / static_cast<double>(D))));
  std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T));
  std::uniform_int_distribution<int32_t> pick_pos(0, 40000);
  for (auto& p : pos) p = pick_pos(rng);
  pos[0] = 0;
  std::vector<int32_t> all(static_cast<size_t>(NB * BS));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t t = 0; t < T; ++t) slots[static_cast<size_t>(t)] = (t % 5 == 3) ? -1 : all[static_cast<size_t>(t)];
  HostTensor positions = test::i32_tensor(pos), slot_t = test::i32_tensor(slots);
  HostTensor q_out(DType::kF32, {T, Hq, D});
  HostTensor kc(c.cache_dtype, {NB, BS, Hk, D}), vc(c.cache_dtype, {NB, BS, Hk, D});
  const float kSentinel = 777.0f;
  for (int64_t i = 0; i < kc.numel(); ++i) {
    kc.set(i, kSentinel);
    vc.set(i, kSentinel);
  }
  AttentionMetadata meta;
  meta.num_tokens = T;
  meta.slot_mapping = slot_t.v;
  meta.block_size = BS;
  ops::RopeParams rope{inv.v, c.scaling};
  ops::qkv_prologue(q_out.v, qkv.v, c.norms ? qn.v : TensorView(), c.norms ? kn.v : TensorView(),
                    static_cast<float>(eps), positions.v, rope, kc.v, vc.v, meta);

  const std::vector<double> x = qkv.to_double(), qw = qn.to_double(), kw = kn.to_double();
  // Reference for head row at column offset `col` of token t.
  auto ref_head = [&](int64_t t, int64_t col, const std::vector<double>* w) {
    std::vector<double> r(x.begin() + t * W + col, x.begin() + t * W + col + D);
    if (w) {
      double ss = 0;
      for (double v : r) ss += v * v;
      const double s = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
      for (int64_t d = 0; d < D; ++d) r[d] = r[d] * s * (*w)[d];
    }
    std::vector<double> o(static_cast<size_t>(D));
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<float>(static_cast<float>(pos[t]) * inv.get(i));  // HF's fp32 angle
      const double cs = std::cos(angle) * c.scaling, sn = std::sin(angle) * c.scaling;
      o[i] = r[i] * cs - r[i + half] * sn;
      o[i + half] = r[i + half] * cs + r[i] * sn;
    }
    return o;
  };
  std::vector<double> q_ref;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      auto o = ref_head(t, h * D, c.norms ? &qw : nullptr);
      q_ref.insert(q_ref.end(), o.begin(), o.end());
    }
  SCOPED_TRACE(::testing::Message() << "T=" << T << " Hq=" << Hq << " Hk=" << Hk << " D=" << D
                                    << " norms=" << c.norms);
  test::expect_close_f32(q_out, q_ref, "q");

  // Expected caches: sentinel everywhere except the written slots.
  std::vector<double> k_ref(static_cast<size_t>(kc.numel()), kSentinel), v_ref(k_ref);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = slots[static_cast<size_t>(t)];
    if (slot < 0) continue;
    for (int64_t h = 0; h < Hk; ++h) {
      auto k = ref_head(t, (Hq + h) * D, c.norms ? &kw : nullptr);
      for (int64_t d = 0; d < D; ++d) {
        k_ref[static_cast<size_t>((slot * Hk + h) * D + d)] = k[d];
        v_ref[static_cast<size_t>((slot * Hk + h) * D + d)] = x[t * W + (Hq + Hk + h) * D + d];
      }
    }
  }
  if (c.cache_dtype == DType::kF32) {
    test::expect_close_f32(kc, k_ref, "k_cache");
    for (size_t i = 0; i < v_ref.size(); ++i) ASSERT_EQ(vc.get(static_cast<int64_t>(i)), v_ref[i]) << i;
  } else {  // bf16 cache: one rounding of the fp32 result (rtol 2^-8)
    for (size_t i = 0; i < k_ref.size(); ++i) {
      ASSERT_NEAR(kc.get(static_cast<int64_t>(i)), k_ref[i], std::abs(k_ref[i]) / 256 + 1e-5) << i;
      ASSERT_NEAR(vc.get(static_cast<int64_t>(i)), v_ref[i], std::abs(v_ref[i]) / 256 + 1e-5) << i;
    }
  }
}

TEST(QkvPrologue, MatchesReferenceOverShapes) {
  uint32_t seed = 1;
  for (int64_t T : {1, 15, 16, 17, 129})
    for (int64_t ratio : {1, 2, 4, 8})
      for (int64_t D : {16, 64, 128}) run({T, 2 * ratio, 2, D, (T + D) % 2 == 1 || D == 128, 1.0f, DType::kF32}, seed++);
}

TEST(QkvPrologue, NoNormsYarnScalingAndBf16Cache) {
  run({17, 4, 1, 64, false, 1.1386294f, DType::kF32}, 50);
  run({33, 8, 2, 128, true, 1.0f, DType::kBF16}, 51);
}

}  // namespace
}  // namespace nanovllm
