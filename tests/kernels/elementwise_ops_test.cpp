// embedding, embedding_vocab_shard, gather_vocab_shards, rms_norm, add_rms_norm, copy_rms_norm, gather_add_rms_norm,
// silu_mul, silu_mlp, gather_rows, convert against double references (or exact copies).
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;
using test::random_tensor;

const int64_t kSizes[] = {1, 15, 16, 17, 129};

TEST(Embedding, CopiesTableRowsForEveryDtype) {
  std::mt19937 rng(1);
  for (DType td : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t H : kSizes) {
      const int64_t V = 37, T = 19;
      HostTensor table = random_tensor(td, {V, H}, rng);
      std::vector<int32_t> ids(T);
      std::uniform_int_distribution<int32_t> pick(0, V - 1);
      for (auto& id : ids) id = pick(rng);
      ids[0] = 0;
      ids[1] = V - 1;
      HostTensor idt = test::i32_tensor(ids);
      HostTensor out(DType::kF32, {T, H});
      ops::embedding(out.v, idt.v, table.v);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          ASSERT_EQ(out.get(t * H + h), table.get(ids[t] * H + h)) << dtype_name(td) << " t=" << t << " h=" << h;
    }
  }
}

// The vocab-parallel embedding: split a table over N ranks (ceil(V / N) rows each, the last zero-padded);
// each rank's output has the rows of its ids and zeros elsewhere, and the sum over ranks is the plain
// embedding of the whole table.
TEST(EmbeddingVocabShard, RanksSumToTheWholeTablesEmbedding) {
  std::mt19937 rng(2);
  for (DType td : {DType::kF32, DType::kBF16}) {
    for (int64_t H : kSizes) {
      for (int64_t n : {1, 2, 3, 8}) {
        const int64_t V = 37, T = 17, per_rank = (V + n - 1) / n;
        HostTensor table = random_tensor(td, {V, H}, rng);
        std::vector<int32_t> ids(T);
        std::uniform_int_distribution<int32_t> pick(0, V - 1);
        for (auto& id : ids) id = pick(rng);
        ids[0] = 0;
        ids[1] = V - 1;
        HostTensor idt = test::i32_tensor(ids);
        std::vector<float> sum(static_cast<size_t>(T * H), 0.0f);
        for (int64_t r = 0; r < n; ++r) {
          HostTensor shard(td, {per_rank, H});  // rows [r per_rank, (r + 1) per_rank) of the table, zero-padded
          for (int64_t i = 0; i < per_rank * H; ++i) {
            const int64_t row = r * per_rank + i / H;
            shard.set(i, row < V ? table.get(row * H + i % H) : 0.0f);
          }
          HostTensor out = random_tensor(DType::kF32, {T, H}, rng);  // every element is written
          ops::embedding_vocab_shard(out.v, idt.v, shard.v, r * per_rank);
          for (int64_t t = 0; t < T; ++t) {
            const bool mine = ids[t] >= r * per_rank && ids[t] < (r + 1) * per_rank;
            for (int64_t h = 0; h < H; ++h) {
              ASSERT_EQ(out.get(t * H + h), mine ? table.get(ids[t] * H + h) : 0.0f)
                  << dtype_name(td) << " n=" << n << " r=" << r << " t=" << t;
              sum[static_cast<size_t>(t * H + h)] += out.get(t * H + h);
            }
          }
        }
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h) ASSERT_EQ(sum[static_cast<size_t>(t * H + h)], table.get(ids[t] * H + h));
      }
    }
  }
}

TEST(GatherVocabShards, UnpadsRankMajorLogits) {
  std::mt19937 rng(3);
  for (int64_t V : {1, 17, 129, 512}) {
    for (int64_t n : {1, 2, 3, 4, 8}) {
      for (int64_t S : {1, 3}) {
        const int64_t per_rank = (V + n - 1) / n;
        HostTensor shards = random_tensor(DType::kF32, {n, S, per_rank}, rng);
        HostTensor out = random_tensor(DType::kF32, {S, V}, rng);
        ops::gather_vocab_shards(out.v, shards.v);
        for (int64_t s = 0; s < S; ++s)
          for (int64_t c = 0; c < V; ++c)
            ASSERT_EQ(out.get(s * V + c), shards.get(((c / per_rank) * S + s) * per_rank + c % per_rank))
                << "V=" << V << " n=" << n << " s=" << s << " c=" << c;
      }
    }
  }
  HostTensor bad(DType::kF32, {2, 1, 8});
  HostTensor out(DType::kF32, {1, 20});  // ceil(20 / 2) = 10 columns per rank, not 8
  EXPECT_THROW(ops::gather_vocab_shards(out.v, bad.v), Error);
}

// Reference: x * (1 / sqrt(mean(x^2) + eps)) * w in double.
std::vector<double> rms_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t T, int64_t H,
                            double eps) {
  std::vector<double> out(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t h = 0; h < H; ++h) ss += x[t * H + h] * x[t * H + h];
    const double r = 1.0 / std::sqrt(ss / H + eps);
    for (int64_t h = 0; h < H; ++h) out[t * H + h] = x[t * H + h] * r * w[h];
  }
  return out;
}

TEST(RmsNorm, MatchesDoubleReference) {
  std::mt19937 rng(2);
  for (DType wd : {DType::kF32, DType::kBF16}) {
    for (int64_t T : kSizes) {
      for (int64_t H : kSizes) {
        HostTensor x = random_tensor(DType::kF32, {T, H}, rng, -3.0f, 3.0f);
        HostTensor w = random_tensor(wd, {H}, rng, 0.5f, 1.5f);
        HostTensor out(DType::kF32, {T, H});
        ops::rms_norm(out.v, x.v, w.v, 1e-6f);
        test::expect_close_f32(out, rms_ref(x.to_double(), w.to_double(), T, H, 1e-6), "rms_norm");
      }
    }
  }
}

TEST(RmsNorm, EpsMattersForTinyRows) {
  std::mt19937 rng(3);
  const int64_t T = 3, H = 17;
  HostTensor x = random_tensor(DType::kF32, {T, H}, rng, -1e-3f, 1e-3f);
  HostTensor w = random_tensor(DType::kF32, {H}, rng, 0.5f, 1.5f);
  HostTensor out(DType::kF32, {T, H});
  ops::rms_norm(out.v, x.v, w.v, 1e-2f);
  test::expect_close_f32(out, rms_ref(x.to_double(), w.to_double(), T, H, static_cast<double>(1e-2f)), "eps");
}

TEST(AddRmsNorm, UpdatesResidualAndNormalises) {
  std::mt19937 rng(4);
  for (int64_t T : kSizes) {
    for (int64_t H : {16, 17, 129}) {
      HostTensor x = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor res = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor w = random_tensor(DType::kF32, {H}, rng, 0.5f, 1.5f);
      std::vector<double> sum = x.to_double();
      const std::vector<double> r0 = res.to_double();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += r0[i];
      ops::add_rms_norm(x.v, res.v, w.v, 1e-5f);
      test::expect_close_f32(res, sum, "residual");
      test::expect_close_f32(x, rms_ref(sum, w.to_double(), T, H, 1e-5), "normed");
    }
  }
}

TEST(CopyRmsNorm, CopiesResidualAndNormalises) {
  std::mt19937 rng(40);
  for (int64_t T : kSizes) {
    for (int64_t H : {16, 17, 129}) {
      HostTensor x = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor res = random_tensor(DType::kF32, {T, H}, rng);  // overwritten, never read
      HostTensor w = random_tensor(DType::kF32, {H}, rng, 0.5f, 1.5f);
      const std::vector<double> x0 = x.to_double();
      ops::copy_rms_norm(x.v, res.v, w.v, 1e-5f);
      test::expect_close_f32(res, x0, "residual");
      test::expect_close_f32(x, rms_ref(x0, w.to_double(), T, H, 1e-5), "normed");
    }
  }
}

// Rows gathered in any order, repeated, into outputs of their own; the inputs stay as they were.
TEST(GatherAddRmsNorm, NormalisesTheGatheredSums) {
  std::mt19937 rng(41);
  const int64_t T = 23;
  for (int64_t S : {1, 5, 23, 40}) {
    for (int64_t H : {16, 17, 129}) {
      HostTensor x = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor res = random_tensor(DType::kF32, {T, H}, rng);
      HostTensor w = random_tensor(DType::kF32, {H}, rng, 0.5f, 1.5f);
      std::vector<int32_t> rows(static_cast<size_t>(S));
      for (auto& r : rows) r = static_cast<int32_t>(rng() % T);
      rows[0] = T - 1;
      const std::vector<double> x0 = x.to_double(), r0 = res.to_double();
      HostTensor out(DType::kF32, {S, H}), out_res(DType::kF32, {S, H});
      ops::gather_add_rms_norm(out.v, out_res.v, x.v, res.v, test::i32_tensor(rows).v, w.v, 1e-5f);
      std::vector<double> sum(static_cast<size_t>(S * H));
      for (int64_t i = 0; i < S; ++i)
        for (int64_t h = 0; h < H; ++h) sum[i * H + h] = x0[rows[i] * H + h] + r0[rows[i] * H + h];
      test::expect_close_f32(out_res, sum, "gathered residual");
      test::expect_close_f32(out, rms_ref(sum, w.to_double(), S, H, 1e-5), "gathered norm");
      test::expect_close_f32(x, x0, "x unchanged");
      test::expect_close_f32(res, r0, "residual unchanged");
    }
  }
}

TEST(GatherAddRmsNorm, RejectsBadRowsAndShapes) {
  std::mt19937 rng(42);
  HostTensor x = random_tensor(DType::kF32, {4, 8}, rng), res = random_tensor(DType::kF32, {4, 8}, rng);
  HostTensor w = random_tensor(DType::kF32, {8}, rng);
  HostTensor out(DType::kF32, {2, 8}), out_res(DType::kF32, {2, 8}), wide(DType::kF32, {2, 9});
  EXPECT_THROW(ops::gather_add_rms_norm(out.v, out_res.v, x.v, res.v, test::i32_tensor({0, 4}).v, w.v, 1e-5f), Error);
  EXPECT_THROW(ops::gather_add_rms_norm(out.v, out_res.v, x.v, res.v, test::i32_tensor({-1, 0}).v, w.v, 1e-5f), Error);
  EXPECT_THROW(ops::gather_add_rms_norm(out.v, out_res.v, x.v, res.v, test::i32_tensor({0}).v, w.v, 1e-5f), Error);
  EXPECT_THROW(ops::gather_add_rms_norm(wide.v, out_res.v, x.v, res.v, test::i32_tensor({0, 1}).v, w.v, 1e-5f), Error);
  HostTensor bf16_res(DType::kBF16, {2, 8});  // the gathered residual keeps the residual's dtype
  EXPECT_THROW(ops::gather_add_rms_norm(out.v, bf16_res.v, x.v, res.v, test::i32_tensor({0, 1}).v, w.v, 1e-5f), Error);
  EXPECT_THROW(ops::copy_rms_norm(x.v, out_res.v, w.v, 1e-5f), Error);
}

TEST(SiluMul, MatchesDoubleReference) {
  std::mt19937 rng(5);
  for (int64_t T : kSizes) {
    for (int64_t I : kSizes) {
      HostTensor gu = random_tensor(DType::kF32, {T, 2 * I}, rng, -6.0f, 6.0f);
      HostTensor out(DType::kF32, {T, I});
      ops::silu_mul(out.v, gu.v);
      const std::vector<double> g = gu.to_double();
      std::vector<double> ref(static_cast<size_t>(T * I));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < I; ++i) {
          const double a = g[t * 2 * I + i], b = g[t * 2 * I + I + i];
          ref[t * I + i] = a / (1.0 + std::exp(-a)) * b;
        }
      test::expect_close_f32(out, ref, "silu_mul");
    }
  }
}

TEST(SiluMlp, MatchesDoubleReference) {
  std::mt19937 rng(7);
  const int64_t K = 24, N = 11;
  for (int64_t T : kSizes) {
    for (int64_t I : {1, 5, 16}) {
      HostTensor x = random_tensor(DType::kF32, {T, K}, rng);
      HostTensor wgu = random_tensor(DType::kF32, {2 * I, K}, rng), wd = random_tensor(DType::kF32, {N, I}, rng);
      HostTensor out(DType::kF32, {T, N}), gate_up(DType::kF32, {T, 2 * I}), act(DType::kF32, {T, I});
      ops::silu_mlp(out.v, x.v, wgu.v, wd.v, gate_up.v, act.v);
      const std::vector<double> xd = x.to_double(), gd = wgu.to_double(), dd = wd.to_double();
      std::vector<double> ref(static_cast<size_t>(T * N), 0.0);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t k = 0; k < K; ++k) {
            g += xd[t * K + k] * gd[i * K + k];
            u += xd[t * K + k] * gd[(I + i) * K + k];
          }
          const double a = g / (1.0 + std::exp(-g)) * u;
          for (int64_t n = 0; n < N; ++n) ref[t * N + n] += a * dd[n * I + i];
        }
      test::expect_close_f32(out, ref, "silu_mlp");
    }
  }
}

TEST(GatherRows, PicksRowsInOrder) {
  std::mt19937 rng(6);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t T = 17, H = 15;
    HostTensor in = random_tensor(dt, {T, H}, rng);
    const std::vector<int32_t> rows = {16, 0, 3, 3, 9};
    HostTensor r = test::i32_tensor(rows);
    HostTensor out(dt, {5, H});
    ops::gather_rows(out.v, in.v, r.v);
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t h = 0; h < H; ++h) ASSERT_EQ(out.get(i * H + h), in.get(rows[i] * H + h));
  }
}

TEST(Convert, RoundsToNearestEvenBothWays) {
  std::mt19937 rng(7);
  const int64_t n = 4096 * 3 + 17;  // several conversion chunks and a tail
  HostTensor x = random_tensor(DType::kF32, {n}, rng, -100.0f, 100.0f);
  HostTensor b(DType::kBF16, {n}), h(DType::kF16, {n}), back(DType::kF32, {n});
  ops::convert(b.v, x.v);
  ops::convert(h.v, x.v);
  const float* xf = x.v.data_as<const float>();
  for (int64_t i = 0; i < n; ++i) {
    // Independent rounding: the nearer of the two bf16 neighbours (truncation and truncation + 1 ulp).
    const uint32_t u = float_bits(xf[i]);
    const float lo = bits_float(u & 0xffff0000u), hi = bits_float((u & 0xffff0000u) + 0x10000u);
    const float want = std::abs(xf[i] - lo) < std::abs(hi - xf[i]) ? lo : hi;
    if (std::abs(xf[i] - lo) != std::abs(hi - xf[i])) {
      ASSERT_EQ(b.get(i), want) << xf[i];
    }
    ASSERT_LE(std::abs(h.get(i) - xf[i]), std::abs(xf[i]) * (1.0 / 2048) + 1e-7) << xf[i];
  }
  ops::convert(back.v, b.v);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back.get(i), b.get(i));
  HostTensor h2(DType::kF16, {n});
  ops::convert(h2.v, b.v);  // bf16 -> f16 through fp32
  for (int64_t i = 0; i < n; ++i)
    ASSERT_LE(std::abs(h2.get(i) - b.get(i)), std::abs(b.get(i)) * (1.0 / 2048) + 1e-7);
}

}  // namespace
}  // namespace nanovllm
