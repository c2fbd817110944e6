// The mixture-of-experts ops on the CPU backend against float64 references written here: the routing
// (softmax, top-k, renormalisation), the grouping by expert, each expert's SwiGLU MLP over its rows, the
// weighted combine, and the whole sparse MLP (moe_mlp) against a direct float64 Qwen3MoeSparseMoeBlock —
// fresh random data, odd sizes, experts no token chose, both top-k algorithms of torch.topk; the order of
// equal probabilities against torch.topk's own (a file from scripts/hf_moe_golden.py); the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernel_test_util.h"
#include "nanovllm/kernels/moe_ops.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

using test::HostTensor;
using test::random_tensor;
using testing::expect_error;

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// v rounded to a float dtype's precision.
double round_to(double v, DType dt) {
  const float f = static_cast<float>(v);
  if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(f));
  if (dt == DType::kF16) return f16_to_f32(f32_to_f16(f));
  return f;
}

// Reference routing of one token: (probability, expert) of the k largest softmax probabilities, in
// decreasing order, the weights renormalised when asked (equal probabilities in any order).
std::vector<std::pair<double, int>> ref_route(const std::vector<double>& logits, int64_t k, bool renormalize) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double l : logits) sum += std::exp(l - m);
  std::vector<std::pair<double, int>> p;
  for (size_t e = 0; e < logits.size(); ++e) p.push_back({std::exp(logits[e] - m) / sum, static_cast<int>(e)});
  std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  p.resize(static_cast<size_t>(k));
  double chosen = 0;
  for (const auto& [v, e] : p) chosen += v;
  if (renormalize)
    for (auto& [v, e] : p) v /= chosen;
  return p;
}

// One expert's SwiGLU MLP of one token in float64 over the stored (rounded) weights; gate and up rounded
// to `act` dtype and the activation too, as the op specifies.
std::vector<double> ref_expert(const HostTensor& gate_up_w, const HostTensor& down_w, int64_t e,
                               const std::vector<double>& x, DType act) {
  const int64_t two_im = gate_up_w.v.dim(1), H = gate_up_w.v.dim(2), Im = two_im / 2;
  auto round = [&](double v) { return round_to(v, act); };
  std::vector<double> a(static_cast<size_t>(Im));
  for (int64_t i = 0; i < Im; ++i) {
    double g = 0, u = 0;
    for (int64_t h = 0; h < H; ++h) {
      g += gate_up_w.get((e * two_im + i) * H + h) * x[static_cast<size_t>(h)];
      u += gate_up_w.get((e * two_im + Im + i) * H + h) * x[static_cast<size_t>(h)];
    }
    a[static_cast<size_t>(i)] = round(silu(round(g)) * round(u));
  }
  std::vector<double> y(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) {
    double s = 0;
    for (int64_t i = 0; i < Im; ++i) s += down_w.get((e * H + h) * Im + i) * a[static_cast<size_t>(i)];
    y[static_cast<size_t>(h)] = s;
  }
  return y;
}

std::vector<double> row_of(const HostTensor& t, int64_t r) {
  const int64_t n = t.v.dim(1);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = t.get(r * n + i);
  return out;
}

// Scratch of moe_mlp for T tokens.
struct Workspace {
  HostTensor logits, ids, weights, offsets, sorted, rows_of_pairs, active, act, rows;
  ops::MoeWorkspace ws;
  Workspace(int64_t T, int64_t E, int64_t k, int64_t H, int64_t Im, DType act_dtype)
      : logits(act_dtype, {T, E}), ids(DType::kI32, {T, k}), weights(DType::kF32, {T, k}),
        offsets(DType::kI32, {E + 1}), sorted(DType::kI32, {T * k}), rows_of_pairs(DType::kI32, {T * k}),
        active(DType::kI32, {E}), act(act_dtype, {T * k, Im}), rows(act_dtype, {T * k, H}) {
    ws = {logits.v, ids.v, weights.v, {offsets.v, sorted.v, rows_of_pairs.v, active.v}, act.v, rows.v};
  }
};

}  // namespace

TEST(MoeRoute, MatchesTheFloat64SoftmaxTopK) {
  std::mt19937 rng(101);
  // (T, E, k): odd sizes; 64 k <= E takes torch's partial_sort path (E 128, k 2), the others nth_element.
  for (auto [T, E, k] : {std::tuple{1, 8, 2}, {7, 13, 3}, {33, 128, 8}, {5, 128, 2}, {17, 9, 9}, {3, 1, 1}}) {
    for (bool renormalize : {false, true}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(::testing::Message() << "T=" << T << " E=" << E << " k=" << k << " renorm=" << renormalize
                                          << " " << dtype_name(dt));
        HostTensor logits = random_tensor(dt, {T, E}, rng, -4.0f, 4.0f);
        HostTensor ids(DType::kI32, {T, k}), w(DType::kF32, {T, k});
        ops::moe_route(ids.v, w.v, logits.v, renormalize);
        for (int64_t t = 0; t < T; ++t) {
          const std::vector<double> l = row_of(logits, t);
          const auto want = ref_route(l, k, renormalize);
          const auto all = ref_route(l, E, false);  // every expert's probability
          std::vector<double> prob(static_cast<size_t>(E));
          for (const auto& [p, e] : all) prob[static_cast<size_t>(e)] = p;
          std::vector<int32_t> seen;
          for (int64_t j = 0; j < k; ++j) {
            // bf16 logits repeat values: an equal-probability expert may stand in for the reference's choice.
            const int32_t id = ids.i32()[t * k + j];
            ASSERT_TRUE(id >= 0 && id < E) << id;
            const double want_p = want[static_cast<size_t>(j)].first;
            const double p_id = prob[static_cast<size_t>(id)];
            const double p_ref = prob[static_cast<size_t>(want[static_cast<size_t>(j)].second)];
            EXPECT_EQ(p_id, p_ref) << "token " << t << " slot " << j << ": expert " << id << " instead of "
                                   << want[static_cast<size_t>(j)].second;
            if (dt == DType::kF32) {
              EXPECT_EQ(id, want[static_cast<size_t>(j)].second) << "no ties in f32 logits";
            }
            EXPECT_NEAR(w.get(t * k + j), want_p, 2e-7 + 1e-6 * want_p) << "token " << t << " slot " << j;
            seen.push_back(id);
          }
          std::sort(seen.begin(), seen.end());
          EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "distinct experts";
        }
      }
    }
  }
}

TEST(MoeRoute, EqualLogitsStillGiveKDistinctExpertsWithEqualWeights) {
  // Every logit equal: any k experts are the top k; each gets 1 / E (1 / k renormalised).
  for (auto [E, k] : {std::pair{8, 2}, {128, 8}, {128, 2}}) {
    HostTensor logits(DType::kF32, {2, E}), ids(DType::kI32, {2, k}), w(DType::kF32, {2, k});
    for (int64_t i = 0; i < 2 * E; ++i) logits.set(i, 0.5f);
    ops::moe_route(ids.v, w.v, logits.v, false);
    std::vector<int32_t> chosen(ids.i32(), ids.i32() + k);
    std::sort(chosen.begin(), chosen.end());
    EXPECT_EQ(std::adjacent_find(chosen.begin(), chosen.end()), chosen.end()) << "distinct experts";
    EXPECT_GE(chosen.front(), 0);
    EXPECT_LT(chosen.back(), E);
    for (int64_t j = 0; j < 2 * k; ++j) EXPECT_FLOAT_EQ(w.get(j), 1.0f / static_cast<float>(E));
    ops::moe_route(ids.v, w.v, logits.v, true);
    for (int64_t j = 0; j < 2 * k; ++j) EXPECT_FLOAT_EQ(w.get(j), 1.0f / static_cast<float>(k));
  }
}

TEST(MoeGroup, StableGroupingWithEmptyExperts) {
  std::mt19937 rng(7);
  for (auto [T, E, k] : {std::tuple{1, 8, 2}, {17, 16, 3}, {129, 128, 8}, {5, 64, 1}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " E=" << E << " k=" << k);
    // Ids from the first half of the experts only (the rest get no token), distinct per token.
    HostTensor ids(DType::kI32, {T, k});
    std::vector<int32_t> pool(static_cast<size_t>(std::max<int64_t>(E / 2, k)));
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t t = 0; t < T; ++t) {
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int64_t j = 0; j < k; ++j) ids.i32()[t * k + j] = pool[static_cast<size_t>(j)];
    }
    const int64_t P = T * k;
    HostTensor offsets(DType::kI32, {E + 1}), sorted(DType::kI32, {P}), rows(DType::kI32, {P});
    HostTensor active(DType::kI32, {E});
    ops::moe_group({offsets.v, sorted.v, rows.v, active.v}, ids.v);
    std::vector<int32_t> want_active;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t p = 0; p < P; ++p)
        if (ids.i32()[p] == e) {
          want_active.push_back(static_cast<int32_t>(e));
          break;
        }
    want_active.resize(static_cast<size_t>(E), -1);
    EXPECT_EQ(std::vector<int32_t>(active.i32(), active.i32() + E), want_active);
    int64_t at = 0;
    for (int64_t e = 0; e < E; ++e) {
      EXPECT_EQ(offsets.i32()[e], at) << "expert " << e;
      for (int64_t p = 0; p < P; ++p) {
        if (ids.i32()[p] != e) continue;
        EXPECT_EQ(sorted.i32()[at], p) << "expert " << e << ": pairs in increasing order";
        EXPECT_EQ(rows.i32()[p], at);
        ++at;
      }
    }
    EXPECT_EQ(offsets.i32()[E], P);
    EXPECT_EQ(at, P);
  }
}

TEST(MoeExperts, EveryRowIsItsExpertsSwiGluMlp) {
  std::mt19937 rng(23);
  for (auto [T, E, k, H, Im] : {std::tuple{1, 8, 2, 16, 8}, {9, 5, 3, 33, 7}, {17, 16, 4, 24, 17}}) {
    for (DType wdt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " E=" << E << " k=" << k << " H=" << H << " Im=" << Im
                                        << " weights " << dtype_name(wdt));
      HostTensor x = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor gate_up = random_tensor(wdt, {E, 2 * Im, H}, rng, -0.3f, 0.3f);
      HostTensor down = random_tensor(wdt, {E, H, Im}, rng, -0.3f, 0.3f);
      // Random routing; expert E - 1 never chosen.
      HostTensor ids(DType::kI32, {T, k});
      std::vector<int32_t> pool(static_cast<size_t>(E - 1));
      std::iota(pool.begin(), pool.end(), 0);
      for (int64_t t = 0; t < T; ++t) {
        std::shuffle(pool.begin(), pool.end(), rng);
        for (int64_t j = 0; j < k; ++j) ids.i32()[t * k + j] = pool[static_cast<size_t>(j)];
      }
      const int64_t P = T * k;
      HostTensor offsets(DType::kI32, {E + 1}), sorted(DType::kI32, {P}), pair_rows(DType::kI32, {P});
      HostTensor active(DType::kI32, {E});
      const ops::MoeGroups g{offsets.v, sorted.v, pair_rows.v, active.v};
      ops::moe_group(g, ids.v);
      HostTensor rows(DType::kF32, {P, H}), act(DType::kF32, {P, Im});
      ops::moe_experts(rows.v, x.v, {gate_up.v, down.v}, g, act.v);
      double worst = 0;
      for (int64_t p = 0; p < P; ++p) {
        const std::vector<double> want = ref_expert(gate_up, down, ids.i32()[p], row_of(x, p / k), DType::kF32);
        const int64_t r = pair_rows.i32()[p];
        for (int64_t h = 0; h < H; ++h) worst = std::max(worst, std::fabs(rows.get(r * H + h) - want[static_cast<size_t>(h)]));
      }
      EXPECT_LT(worst, 1e-5);
    }
  }
}

TEST(MoeCombine, WeightedSumOfEachTokensRows) {
  std::mt19937 rng(5);
  for (auto [T, k, H] : {std::tuple{1, 1, 8}, {7, 3, 33}, {16, 8, 64}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T << " k=" << k << " H=" << H);
    const int64_t P = T * k;
    HostTensor rows = random_tensor(DType::kF32, {P, H}, rng), w = random_tensor(DType::kF32, {T, k}, rng, 0.f, 1.f);
    std::vector<int32_t> perm(static_cast<size_t>(P));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    HostTensor pair_rows = test::i32_tensor(perm);
    for (DType out_dt : {DType::kF32, DType::kBF16}) {
      HostTensor out(out_dt, {T, H});
      ops::moe_combine(out.v, rows.v, w.v, pair_rows.v);
      std::vector<double> want(static_cast<size_t>(T * H), 0.0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t h = 0; h < H; ++h)
            want[static_cast<size_t>(t * H + h)] += w.get(t * k + j) * rows.get(perm[static_cast<size_t>(t * k + j)] * H + h);
      EXPECT_LT(test::max_abs_err(out, want), out_dt == DType::kF32 ? 1e-5 : 2e-2) << dtype_name(out_dt);
    }
  }
}

// The whole sparse MLP against transformers' Qwen3MoeSparseMoeBlock written out in float64: router logits,
// softmax, top-k, optional renormalisation, sum of the chosen experts' outputs times their weights.
TEST(MoeMlp, MatchesAFloat64SparseMoeBlock) {
  std::mt19937 rng(77);
  for (auto [T, E, k, H, Im] : {std::tuple{1, 8, 2, 32, 16}, {13, 9, 3, 33, 7}, {40, 16, 4, 48, 24},
                                {5, 128, 8, 16, 8}}) {
    for (bool renormalize : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "T=" << T << " E=" << E << " k=" << k << " H=" << H << " Im=" << Im
                                        << " renorm=" << renormalize);
      HostTensor x = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor router = random_tensor(DType::kBF16, {E, H}, rng, -1.f, 1.f);
      HostTensor gate_up = random_tensor(DType::kBF16, {E, 2 * Im, H}, rng, -0.3f, 0.3f);
      HostTensor down = random_tensor(DType::kBF16, {E, H, Im}, rng, -0.3f, 0.3f);
      Workspace w(T + 3, E, k, H, Im, DType::kF32);  // room for more tokens than the call has
      HostTensor out(DType::kF32, {T, H});
      ops::moe_mlp(out.v, x.v, router.v, {gate_up.v, down.v}, renormalize, w.ws);

      std::vector<double> want(static_cast<size_t>(T * H), 0.0);
      std::vector<int> used(static_cast<size_t>(E), 0);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<double> xt = row_of(x, t);
        std::vector<double> logits(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) {
          double s = 0;
          for (int64_t h = 0; h < H; ++h) s += router.get(e * H + h) * xt[static_cast<size_t>(h)];
          logits[static_cast<size_t>(e)] = s;
        }
        for (const auto& [weight, e] : ref_route(logits, k, renormalize)) {
          ++used[static_cast<size_t>(e)];
          const std::vector<double> y = ref_expert(gate_up, down, e, xt, DType::kF32);
          for (int64_t h = 0; h < H; ++h) want[static_cast<size_t>(t * H + h)] += weight * y[static_cast<size_t>(h)];
        }
      }
      EXPECT_LT(test::nmse(out, want), 1e-10);
      EXPECT_LT(test::max_abs_err(out, want), 1e-5);
      if (E > T * k) {
        EXPECT_GT(std::count(used.begin(), used.end(), 0), 0) << "some expert got no token";
      }
    }
  }
}

TEST(MoeMlp, OutMayAliasXAndZeroTokensIsANoOp) {
  std::mt19937 rng(3);
  const int64_t T = 6, E = 8, k = 2, H = 16, Im = 8;
  HostTensor x = random_tensor(DType::kF32, {T, H}, rng);
  HostTensor router = random_tensor(DType::kF32, {E, H}, rng);
  HostTensor gate_up = random_tensor(DType::kF32, {E, 2 * Im, H}, rng);
  HostTensor down = random_tensor(DType::kF32, {E, H, Im}, rng);
  Workspace w(T, E, k, H, Im, DType::kF32);
  HostTensor out(DType::kF32, {T, H});
  ops::moe_mlp(out.v, x.v, router.v, {gate_up.v, down.v}, true, w.ws);
  ops::moe_mlp(x.v, x.v, router.v, {gate_up.v, down.v}, true, w.ws);
  for (int64_t i = 0; i < T * H; ++i) ASSERT_EQ(x.get(i), out.get(i)) << i;
  ops::moe_mlp(out.v.slice_rows(0, 0), x.v.slice_rows(0, 0), router.v, {gate_up.v, down.v}, true, w.ws);
}

TEST(MoeOps, BadArgumentsAreNamed) {
  const int64_t T = 4, E = 8, k = 2, H = 16, Im = 8;
  HostTensor logits(DType::kF32, {T, E}), ids(DType::kI32, {T, k}), w(DType::kF32, {T, k});
  for (int64_t i = 0; i < T * E; ++i) logits.set(i, static_cast<float>(i % 5));
  HostTensor ids_wide(DType::kI32, {T, E + 1}), w_wide(DType::kF32, {T, E + 1});
  expect_error([&] { ops::moe_route(ids_wide.v, w_wide.v, logits.v, true); }, {"moe_route", "topk_ids", "1 to 8"});
  HostTensor w_bf16(DType::kBF16, {T, k});
  expect_error([&] { ops::moe_route(ids.v, w_bf16.v, logits.v, true); }, {"moe_route", "topk_weights", "F32"});
  HostTensor huge(DType::kF32, {1, 1024});
  HostTensor ids1(DType::kI32, {1, 1}), w1(DType::kF32, {1, 1});
  expect_error([&] { ops::moe_route(ids1.v, w1.v, huge.v, true); }, {"moe_route", "experts", "512"});

  HostTensor offsets(DType::kI32, {E + 1}), sorted(DType::kI32, {T * k}), rows_of(DType::kI32, {T * k});
  HostTensor active(DType::kI32, {E});
  const ops::MoeGroups g{offsets.v, sorted.v, rows_of.v, active.v};
  for (int64_t i = 0; i < T * k; ++i) ids.i32()[i] = static_cast<int32_t>(i % E);
  ids.i32()[3] = E;  // outside [0, E)
  expect_error([&] { ops::moe_group(g, ids.v); }, {"moe_group", "topk_ids[1, 1]", "outside [0, 8)"});
  HostTensor short_sorted(DType::kI32, {T * k - 1});
  expect_error([&] { ops::moe_group({offsets.v, short_sorted.v, rows_of.v, active.v}, ids.v); },
               {"moe_group", "sorted_pairs"});

  HostTensor x(DType::kF32, {T, H}), gate_up(DType::kF32, {E, 2 * Im, H}), down(DType::kF32, {E, H, Im});
  HostTensor rows(DType::kF32, {T * k, H}), act(DType::kF32, {T * k, Im});
  ids.i32()[3] = 1;
  ops::moe_group(g, ids.v);
  HostTensor down_bad(DType::kF32, {E, H, Im + 1});
  expect_error([&] { ops::moe_experts(rows.v, x.v, {gate_up.v, down_bad.v}, g, act.v); }, {"moe_experts", "down_w"});
  HostTensor down_bf16(DType::kBF16, {E, H, Im});
  expect_error([&] { ops::moe_experts(rows.v, x.v, {gate_up.v, down_bf16.v}, g, act.v); },
               {"moe_experts", "down_w is BF16", "gate_up_w is F32"});
  // fp8 experts run on CUDA only (the CPU backend loads them dequantized); scales go with fp8 codes only.
  HostTensor gate_up_fp8(DType::kF8E4M3, {E, 2 * Im, H}), down_fp8(DType::kF8E4M3, {E, H, Im});
  HostTensor gate_up_scale(DType::kF32, {E, 1, 1}), down_scale(DType::kF32, {E, 1, 1});
  expect_error([&] { ops::moe_experts(rows.v, x.v, {gate_up_fp8.v, down_fp8.v, gate_up_scale.v, down_scale.v}, g, act.v); },
               {"moe_experts", "fp8 expert weights run on CUDA only"});
  expect_error([&] { ops::moe_experts(rows.v, x.v, {gate_up.v, down.v, gate_up_scale.v, down_scale.v}, g, act.v); },
               {"moe_experts", "block scales given with F32 expert weights"});
  HostTensor gate_up_odd(DType::kF32, {E, 2 * Im + 1, H});
  expect_error([&] { ops::moe_experts(rows.v, x.v, {gate_up_odd.v, down.v}, g, act.v); }, {"moe_experts", "gate | up"});
  sorted.i32()[0] = sorted.i32()[1];  // not a permutation any more
  expect_error([&] { ops::moe_experts(rows.v, x.v, {gate_up.v, down.v}, g, act.v); }, {"moe_experts", "sorted_pairs[0]"});

  HostTensor out(DType::kF32, {T, H});
  HostTensor bad_rows = test::i32_tensor(std::vector<int32_t>(static_cast<size_t>(T * k), static_cast<int32_t>(T * k)));
  expect_error([&] { ops::moe_combine(out.v, rows.v, w.v, bad_rows.v); }, {"moe_combine", "pair_rows[0]", "outside"});

  Workspace small(2, E, k, H, Im, DType::kF32);
  HostTensor router(DType::kF32, {E, H});
  expect_error([&] { ops::moe_mlp(out.v, x.v, router.v, {gate_up.v, down.v}, true, small.ws); },
               {"moe_mlp", "4 tokens", "room for 2"});
  HostTensor router_bad(DType::kF32, {E - 1, H});
  expect_error([&] { ops::moe_mlp(out.v, x.v, router_bad.v, {gate_up.v, down.v}, true, small.ws); },
               {"moe_mlp", "router_w"});
}

}  // namespace nanovllm

namespace nanovllm {

// The order torch.topk gives equal softmax probabilities on the CPU (recorded by scripts/hf_moe_golden.py
// from torch itself), on both of its algorithms: moe_route must pick the same experts in the same order.
TEST(MoeRoute, TiesAreOrderedAsTorchTopkOnTheCpu) {
  const std::filesystem::path path = std::filesystem::path(NANOVLLM_TEST_DATA) / "golden" / "qwen3_moe_topk_ties.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path.string()
                         << " — run `python3 scripts/hf_moe_golden.py --out tests/data/golden` where torch is installed";
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_GE(golden["cases"].size(), 1u);
  for (const auto& c : golden["cases"]) {
    const int64_t E = c["experts"].get<int64_t>(), k = c["k"].get<int64_t>();
    const auto logits = c["logits"].get<std::vector<std::vector<float>>>();
    const auto want = c["ids"].get<std::vector<std::vector<int32_t>>>();
    const int64_t T = static_cast<int64_t>(logits.size());
    HostTensor l(DType::kF32, {T, E}), ids(DType::kI32, {T, k}), w(DType::kF32, {T, k});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) l.set(t * E + e, logits[static_cast<size_t>(t)][static_cast<size_t>(e)]);
    ops::moe_route(ids.v, w.v, l.v, false);
    for (int64_t t = 0; t < T; ++t)
      EXPECT_EQ(std::vector<int32_t>(ids.i32() + t * k, ids.i32() + (t + 1) * k), want[static_cast<size_t>(t)])
          << "E=" << E << " k=" << k << " row " << t;
  }
}

}  // namespace nanovllm
