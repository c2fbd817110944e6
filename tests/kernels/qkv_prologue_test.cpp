// qkv_prologue against a double reference of HF's Qwen3 attention prologue: per-head RMSNorm of q/k,
// rotate_half RoPE with the fp32 angle float(pos) * inv_freq[i] (as HF forms it), cos/sin scaled by
// attention_scaling; K/V stored at slot_mapping, slot -1 skipped, every other slot untouched. GLM-4's
// variant as transformers' modeling_glm.py writes it: cos/sin of the first R/2 frequencies repeat_interleave'd,
// rotate_half over the pairs (2i, 2i + 1) of the first R elements, the rest of the head passed through.
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
  int64_t rope_pairs = 0;  // 0: D/2 (rotate_half); > 0: interleaved on the first 2 * rope_pairs elements
};

void run(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t T = c.T, Hq = c.Hq, Hk = c.Hk, D = c.D, half = D / 2, BS = 16;
  const bool interleaved = c.rope_pairs > 0;
  const int64_t pairs = interleaved ? c.rope_pairs : half, R = 2 * pairs;
  const int64_t NB = (T + BS - 1) / BS + 2, W = (Hq + 2 * Hk) * D;
  const double eps = 1e-6;
  HostTensor qkv = test::random_tensor(DType::kF32, {T, W}, rng, -2.0f, 2.0f);
  HostTensor qn = test::random_tensor(DType::kF32, {D}, rng, 0.5f, 1.5f);
  HostTensor kn = test::random_tensor(DType::kBF16, {D}, rng, 0.5f, 1.5f);
  HostTensor inv(DType::kF32, {pairs});
  for (int64_t i = 0; i < pairs; ++i)  // any positive frequencies will do; these are the default table's
    inv.set(i, static_cast<float>(std::pow(1e6, -2.0 * static_cast<double>(i) / static_cast<double>(R))));
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
  ops::RopeParams rope{inv.v, c.scaling, interleaved};
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
    auto angle = [&](int64_t i) {  // HF's fp32 angle
      return static_cast<double>(static_cast<float>(static_cast<float>(pos[t]) * inv.get(i)));
    };
    if (interleaved) {
      std::vector<double> rot(static_cast<size_t>(R));  // stack((-x2, x1), -1).flatten(-2)
      for (int64_t i = 0; i < pairs; ++i) {
        rot[2 * i] = -r[2 * i + 1];
        rot[2 * i + 1] = r[2 * i];
      }
      for (int64_t j = 0; j < D; ++j) {
        if (j >= R) {  // q_pass: past the rotated part (the table has R / 2 frequencies)
          o[j] = r[j];
          continue;
        }
        const double cs = std::cos(angle(j / 2)) * c.scaling, sn = std::sin(angle(j / 2)) * c.scaling;
        o[j] = r[j] * cs + rot[j] * sn;  // cos[..., :R/2].repeat_interleave(2)
      }
      return o;
    }
    for (int64_t i = 0; i < half; ++i) {
      const double cs = std::cos(angle(i)) * c.scaling, sn = std::sin(angle(i)) * c.scaling;
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
                                    << " norms=" << c.norms << " rope_pairs=" << c.rope_pairs);
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

// GLM-4: RoPE on half the head (R = D/2), pairs (2i, 2i + 1); also a full interleaved head and an odd
// count of pairs.
TEST(QkvPrologue, InterleavedPartialRotary) {
  uint32_t seed = 100;
  for (int64_t T : {1, 17})
    for (int64_t D : {16, 64, 128}) run({T, 4, 2, D, false, 1.0f, DType::kF32, D / 4}, seed++);
  run({9, 2, 1, 64, false, 1.0f, DType::kF32, 32}, seed++);   // the whole head, interleaved
  run({9, 6, 3, 40, true, 1.05f, DType::kBF16, 5}, seed++);   // odd pairs, norms, scaling, bf16 cache
}

TEST(QkvPrologue, RefusesFrequencyCountsThatDoNotFit) {
  const int64_t T = 1, H = 1, D = 16;
  HostTensor qkv(DType::kF32, {T, 3 * H * D}), q(DType::kF32, {T, H, D});
  HostTensor kc(DType::kF32, {2, 16, H, D}), vc(DType::kF32, {2, 16, H, D});
  HostTensor positions = test::i32_tensor({0}), slots = test::i32_tensor({0});
  AttentionMetadata meta;
  meta.num_tokens = T;
  meta.slot_mapping = slots.v;
  meta.block_size = 16;
  for (auto [pairs, interleaved] : {std::pair<int64_t, bool>{4, false}, {9, true}}) {
    HostTensor inv(DType::kF32, {pairs});
    EXPECT_THROW(ops::qkv_prologue(q.v, qkv.v, TensorView(), TensorView(), 1e-6f, positions.v,
                                   ops::RopeParams{inv.v, 1.0f, interleaved}, kc.v, vc.v, meta),
                 Error)
        << pairs;
  }
}

}  // namespace
}  // namespace nanovllm
