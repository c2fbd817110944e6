// The sparse prefill pattern estimators (CPU reference) on crafted inputs: a planted vertical line (one key every query
// attends), a planted diagonal (each query attends the key delta positions back) and a planted hot block (one query
// block attends one key block) must be found by the estimators built to find them; a threshold of 1 (or budgets
// covering everything) gives the full causal pattern, which block_sparse_prefill_attention turns into paged_attention
// exactly; low thresholds list fewer blocks; every estimated pattern satisfies block_sparse_prefill_attention's
// contract (it runs on it); bad arguments are refused. The test owns the keys and queries and scatters the keys into a
// paged cache (block size 16) through a shuffled block table.
#include "nanovllm/kernels/pattern_estimators.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

// One sequence of ctx positions whose last T are the chunk's queries. K [ctx][Hk][D] and Q [T][Hq][D] are filled by the
// test (small noise plus what it plants), then upload() writes the cache and q.
struct Chunk {
  int64_t ctx, T, Hq, Hk, D, BS = 16;
  std::vector<float> K, V, Q;
  std::vector<int32_t> ids;
  HostTensor q, k_cache, v_cache, cu, ctx_t, bt, slots;
  AttentionMetadata meta;

  Chunk(int64_t c, int64_t t, int64_t hq, int64_t hk, int64_t d, std::mt19937& rng, float noise = 0.3f)
      : ctx(c), T(t), Hq(hq), Hk(hk), D(d) {
    std::normal_distribution<float> n(0.0f, noise);
    for (int64_t i = 0; i < ctx * Hk * D; ++i) K.push_back(n(rng));
    for (int64_t i = 0; i < ctx * Hk * D; ++i) V.push_back(n(rng));
    for (int64_t i = 0; i < T * Hq * D; ++i) Q.push_back(n(rng));
    const int64_t blocks = (ctx + BS - 1) / BS, NB = blocks + 3;
    ids.resize(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<size_t>(blocks));
  }
  float& key(int64_t p, int64_t h, int64_t d) { return K[static_cast<size_t>((p * Hk + h) * D + d)]; }
  float& query(int64_t pos, int64_t g, int64_t d) {
    return Q[static_cast<size_t>(((pos - (ctx - T)) * Hq + g) * D + d)];
  }

  void upload() {
    const int64_t blocks = static_cast<int64_t>(ids.size()), NB = blocks + 3;
    k_cache = HostTensor(DType::kF32, {NB, BS, Hk, D});
    v_cache = HostTensor(DType::kF32, {NB, BS, Hk, D});
    for (int64_t i = 0; i < k_cache.numel(); ++i) {
      k_cache.set(i, 1000.0f);  // garbage in the slots no position maps to
      v_cache.set(i, -1000.0f);
    }
    std::vector<int32_t> slot_v;
    for (int64_t p = 0; p < ctx; ++p) {
      const int64_t slot = int64_t{ids[static_cast<size_t>(p / BS)]} * BS + p % BS;
      for (int64_t i = 0; i < Hk * D; ++i) {
        k_cache.set(slot * Hk * D + i, K[static_cast<size_t>(p * Hk * D + i)]);
        v_cache.set(slot * Hk * D + i, V[static_cast<size_t>(p * Hk * D + i)]);
      }
      if (p >= ctx - T) slot_v.push_back(static_cast<int32_t>(slot));
    }
    q = HostTensor(DType::kF32, {T, Hq, D});
    std::copy(Q.begin(), Q.end(), q.v.data_as<float>());
    cu = test::i32_tensor({0, static_cast<int32_t>(T)});
    ctx_t = test::i32_tensor({static_cast<int32_t>(ctx)});
    bt = test::i32_tensor(ids, {1, blocks});
    slots = test::i32_tensor(slot_v);
    meta.num_seqs = 1;
    meta.num_tokens = T;
    meta.max_query_len = T;
    meta.max_context_len = ctx;
    meta.cu_seqlens_q = cu.v;
    meta.context_lens = ctx_t.v;
    meta.block_tables = bt.v;
    meta.slot_mapping = slots.v;
    meta.block_size = BS;
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
};

// Pattern storage of the widest shape the estimators may fill, and what they wrote.
struct Estimate {
  int64_t bs, Hk, NQB, first;
  HostTensor bc, bi, cc, ci;
  ops::BlockSparsePattern p;

  Estimate(const Chunk& c, int64_t block_size, int64_t max_columns = 0)
      : bs(block_size), Hk(c.Hk), NQB((c.ctx + block_size - 1) / block_size), first((c.ctx - c.T) / block_size) {
    bc = HostTensor(DType::kI32, {Hk, NQB});
    bi = HostTensor(DType::kI32, {Hk, NQB, NQB});
    p.block_size = bs;
    p.block_counts = bc.v;
    p.block_index = bi.v;
    if (max_columns > 0) {
      cc = HostTensor(DType::kI32, {Hk, NQB});
      ci = HostTensor(DType::kI32, {Hk, NQB, max_columns});
      p.column_counts = cc.v;
      p.column_index = ci.v;
    }
    for (HostTensor* t : {&bc, &bi, &cc, &ci})  // garbage: the estimators must write every entry they promise
      if (!t->bytes.empty()) std::fill(t->i32(), t->i32() + t->numel(), 7777);
  }
  std::vector<int32_t> blocks(int64_t h, int64_t i) const {
    const int32_t* list = bi.v.data_as<const int32_t>() + (h * NQB + i) * NQB;
    return {list, list + bc.v.data_as<const int32_t>()[h * NQB + i]};
  }
  std::vector<int32_t> columns(int64_t h, int64_t i) const {
    if (!p.column_counts.defined()) return {};
    const int64_t width = ci.v.dim(2);
    const int32_t* list = ci.v.data_as<const int32_t>() + (h * NQB + i) * width;
    return {list, list + cc.v.data_as<const int32_t>()[h * NQB + i]};
  }
  bool lists(int64_t h, int64_t i, int32_t j) const {
    const std::vector<int32_t> b = blocks(h, i);
    return std::find(b.begin(), b.end(), j) != b.end();
  }
  bool covers(int64_t h, int64_t i,
              int32_t key) const {  // key position attended by query block i
    const std::vector<int32_t> c = columns(h, i);
    return lists(h, i, key / static_cast<int32_t>(bs)) || std::find(c.begin(), c.end(), key) != c.end();
  }
  // Listed (query block, key block) pairs of the chunk's query blocks, and the causal ones; of KV head `only` when >=
  // 0.
  int64_t listed(int64_t only = -1) const {
    int64_t n = 0;
    for (int64_t h = 0; h < Hk; ++h)
      for (int64_t i = first; i < NQB; ++i)
        if (only < 0 || h == only) n += static_cast<int64_t>(blocks(h, i).size());
    return n;
  }
  int64_t causal(int64_t only = -1) const {
    int64_t n = 0;
    for (int64_t i = first; i < NQB; ++i) n += (only < 0 ? Hk : 1) * (i + 1);
    return n;
  }
};

// Runs block_sparse_prefill_attention on the estimate: it validates the contract (increasing distinct causal blocks,
// columns outside them), so every estimate below goes through it.
HostTensor attend(const Chunk& c, const Estimate& e) {
  HostTensor out(DType::kF32, {c.T, c.Hq, c.D});
  ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, e.p, c.scale());
  return out;
}

void expect_sink_and_diagonal(const Estimate& e) {
  for (int64_t h = 0; h < e.Hk; ++h)
    for (int64_t i = e.first; i < e.NQB; ++i) {
      EXPECT_TRUE(e.lists(h, i, 0)) << "head " << h << " block " << i;
      EXPECT_TRUE(e.lists(h, i, static_cast<int32_t>(i))) << "head " << h << " block " << i;
    }
}

void expect_full(const Estimate& e) {
  for (int64_t h = 0; h < e.Hk; ++h)
    for (int64_t i = 0; i < e.first; ++i)  // rows before the chunk are not written (O(NQB^2) per chunk)
      EXPECT_EQ(e.bc.v.data_as<const int32_t>()[h * e.NQB + i], 7777) << "head " << h << " block " << i;
  for (int64_t h = 0; h < e.Hk; ++h)
    for (int64_t i = e.first; i < e.NQB; ++i) {
      std::vector<int32_t> all(static_cast<size_t>(i + 1));
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(e.blocks(h, i), all) << "head " << h << " block " << i;
      EXPECT_TRUE(e.columns(h, i).empty());
    }
}

using Estimator = std::function<void(const Chunk&, Estimate&)>;

// A vertical line at key position v of KV head 0: every query of query head g0 (in that group) points at it.
void plant_vertical(Chunk& c, int64_t v, int64_t g0) {
  for (int64_t d = 0; d < c.D; ++d) c.key(v, 0, d) = d == 3 ? 8.0f : 0.0f;
  for (int64_t pos = c.ctx - c.T; pos < c.ctx; ++pos) c.query(pos, g0, 3) += 7.0f;
}

// A diagonal at offset delta for query head g0 (KV head h0): RoPE-like rotations make q_p . k_j peak at j = p - delta
// and decay away from it.
void plant_diagonal(Chunk& c, int64_t delta, int64_t g0) {
  const int64_t h0 = g0 / (c.Hq / c.Hk), pairs = c.D / 2;
  for (int64_t j = 0; j < c.ctx; ++j)
    for (int64_t f = 0; f < pairs; ++f) {
      const double a = static_cast<double>(j + delta) * std::pow(0.5, static_cast<double>(f) * 8.0 / pairs);
      c.key(j, h0, 2 * f) = static_cast<float>(2.0 * std::cos(a));
      c.key(j, h0, 2 * f + 1) = static_cast<float>(2.0 * std::sin(a));
    }
  for (int64_t p = c.ctx - c.T; p < c.ctx; ++p)
    for (int64_t f = 0; f < pairs; ++f) {
      const double a = static_cast<double>(p) * std::pow(0.5, static_cast<double>(f) * 8.0 / pairs);
      c.query(p, g0, 2 * f) = static_cast<float>(2.0 * std::cos(a));
      c.query(p, g0, 2 * f + 1) = static_cast<float>(2.0 * std::sin(a));
    }
}

// A hot block: the queries of query block qi (block size bs) of query head g0 and the keys of key block kj (KV head of
// g0) share a strong direction.
void plant_hot_block(Chunk& c, int64_t bs, int64_t qi, int64_t kj, int64_t g0) {
  const int64_t h0 = g0 / (c.Hq / c.Hk);
  for (int64_t j = kj * bs; j < (kj + 1) * bs; ++j) c.key(j, h0, 5) += 4.0f;
  for (int64_t p = qi * bs; p < std::min((qi + 1) * bs, c.ctx); ++p)
    if (p >= c.ctx - c.T) c.query(p, g0, 5) += 4.0f;
}

const ops::VerticalSlashParams kSmallVerticalSlash{
    .last_q = 16, .vertical = 6, .slash = 6, .sink_tokens = 4, .recent_diagonals = 4};

TEST(PatternEstimators, MInferenceFindsAPlantedVerticalLine) {
  std::mt19937 rng(11);
  Chunk c(300, 300, 4, 2, 32, rng);
  plant_vertical(c, 77, 1);
  c.upload();
  Estimate e(c, 32, ops::vertical_slash_max_columns(c.ctx, 2, kSmallVerticalSlash.vertical));
  ops::vertical_slash_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(), kSmallVerticalSlash);
  attend(c, e);
  expect_sink_and_diagonal(e);
  for (int64_t i = 77 / 32 + 1; i < e.NQB; ++i) {
    EXPECT_TRUE(e.covers(0, i, 77)) << "query block " << i;
  }
  EXPECT_LT(e.listed(), e.causal());  // not everything
}

TEST(PatternEstimators, FlexPrefillFindsAPlantedVerticalLine) {
  std::mt19937 rng(12);
  Chunk c(520, 520, 4, 2, 32, rng);
  plant_vertical(c, 200, 0);  // both query heads of KV head 0 (random ones attend everything alike)
  plant_vertical(c, 200, 1);
  c.upload();
  Estimate e(c, 32);
  ops::flexprefill_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.gamma = 0.9, .tau = 0.1, .min_budget = 64});
  attend(c, e);
  expect_sink_and_diagonal(e);
  // (Two blocks of budget: block 0 is always the first vertical block, as in the published code.)
  for (int64_t i = 200 / 32; i < e.NQB; ++i) EXPECT_TRUE(e.lists(0, i, 200 / 32)) << "query block " << i;
  EXPECT_LT(e.listed(), e.causal());
}

TEST(PatternEstimators, MInferenceXAttentionAndFlexPrefillFindAPlantedDiagonal) {
  const int64_t delta = 112,
                bs = 32;  // rows of a query block reach two key blocks, half each
  std::mt19937 rng(13);
  Chunk c(448, 448, 2, 1, 32, rng);
  plant_diagonal(c, delta, 0);  // both query heads of the group
  plant_diagonal(c, delta, 1);
  c.upload();
  // Every query row p of the chunk must reach key p - delta.
  auto expect_diagonal = [&](const Estimate& e, const char* who) {
    for (int64_t p = delta; p < c.ctx; ++p)
      EXPECT_TRUE(e.covers(0, p / bs, static_cast<int32_t>(p - delta))) << who << " row " << p;
    EXPECT_LT(e.listed(), e.causal()) << who;
  };
  Estimate mi(c, bs, ops::vertical_slash_max_columns(c.ctx, 2, kSmallVerticalSlash.vertical));
  ops::vertical_slash_estimate(mi.p, c.q.v, c.k_cache.v, c.meta, c.scale(), kSmallVerticalSlash);
  attend(c, mi);
  expect_diagonal(mi, "minference");
  Estimate xa(c, bs);
  ops::xattention_estimate(xa.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.stride = 8, .threshold = 0.95});
  attend(c, xa);
  expect_sink_and_diagonal(xa);
  expect_diagonal(xa, "xattention");
  // FlexPrefill keeps block diagonals: query block i reaches key block i - delta / bs.
  Estimate fp(c, bs);
  ops::flexprefill_estimate(fp.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.gamma = 0.9, .tau = 0.1, .min_budget = 64});
  attend(c, fp);
  for (int64_t i = delta / bs; i < fp.NQB; ++i) EXPECT_TRUE(fp.lists(0, i, static_cast<int32_t>(i - delta / bs))) << i;
  EXPECT_LT(fp.listed(), fp.causal());
}

TEST(PatternEstimators, XAttentionAndAvgPoolFindAPlantedHotBlockForOneHeadOfTheGroup) {
  const int64_t bs = 32, qi = 9, kj = 3;
  std::mt19937 rng(14);
  Chunk c(320, 320, 4, 2, 32, rng);
  plant_hot_block(c, bs, qi, kj,
                  1);  // query head 1: KV head 0 (heads 0 and 1 share it)
  c.upload();
  Estimate xa(c, bs), ap(c, bs);
  ops::xattention_estimate(xa.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.stride = 8, .threshold = 0.5});
  ops::avgpool_estimate(ap.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.5});
  for (const Estimate* e : {&xa, &ap}) {
    attend(c, *e);
    expect_sink_and_diagonal(*e);
    EXPECT_TRUE(e->lists(0, qi, kj));
    EXPECT_LT(e->listed(), e->causal());
  }
}

TEST(PatternEstimators, FullThresholdsGiveTheFullCausalPatternAndDenseAttention) {
  std::mt19937 rng(15);
  // A chunk after a prefix, starting mid-block; GQA 4:1; ctx not a multiple of anything.
  Chunk c(437, 150, 8, 2, 16, rng);
  plant_vertical(c, 50, 0);
  c.upload();
  HostTensor dense(DType::kF32, {c.T, c.Hq, c.D});
  ops::paged_attention(dense.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, c.scale());
  std::vector<std::pair<const char*, Estimator>> estimators = {
      {"xattention",
       [](const Chunk& ch, Estimate& e) {
         ops::xattention_estimate(e.p, ch.q.v, ch.k_cache.v, ch.meta, ch.scale(), {.stride = 4, .threshold = 1.0});
       }},
      {"minference",
       [](const Chunk& ch, Estimate& e) {
         ops::vertical_slash_estimate(e.p, ch.q.v, ch.k_cache.v, ch.meta, ch.scale(),
                                      {.last_q = 64, .vertical = 0, .slash = ch.ctx});
       }},
      {"flexprefill",
       [](const Chunk& ch, Estimate& e) {
         ops::flexprefill_estimate(e.p, ch.q.v, ch.k_cache.v, ch.meta, ch.scale(), {.gamma = 1.0});
       }},
      {"flexprefill budget",
       [](const Chunk& ch, Estimate& e) {  // a minimum budget of every block
         ops::flexprefill_estimate(e.p, ch.q.v, ch.k_cache.v, ch.meta, ch.scale(),
                                   {.gamma = 0.5, .min_budget = ch.ctx});
       }},
      {"avgpool",
       [](const Chunk& ch, Estimate& e) {
         ops::avgpool_estimate(e.p, ch.q.v, ch.k_cache.v, ch.meta, ch.scale(), {.threshold = 1.0});
       }},
  };
  for (const auto& [name, run] : estimators) {
    for (int64_t bs : {16, 32, 64}) {
      SCOPED_TRACE(testing::Message() << name << " bs " << bs);
      Estimate e(c, bs, 4);
      run(c, e);
      expect_full(e);
      const HostTensor out = attend(c, e);
      EXPECT_EQ(std::memcmp(out.bytes.data(), dense.bytes.data(), out.bytes.size()),
                0);  // bit for bit
    }
  }
}

TEST(PatternEstimators, LowerThresholdsListFewerBlocksAndEstimatesAreDeterministic) {
  std::mt19937 rng(16);
  Chunk c(400, 400, 4, 2, 32, rng, 1.0f);
  c.upload();
  auto xa = [&](double tau) {
    auto e = std::make_unique<Estimate>(c, 16);
    ops::xattention_estimate(e->p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.stride = 8, .threshold = tau});
    return e;
  };
  auto ap = [&](double tau) {
    auto e = std::make_unique<Estimate>(c, 16);
    ops::avgpool_estimate(e->p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.threshold = tau});
    return e;
  };
  auto fp = [&](double gamma) {
    auto e = std::make_unique<Estimate>(c, 16);
    ops::flexprefill_estimate(e->p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.gamma = gamma, .min_budget = 16});
    return e;
  };
  for (const auto& make :
       {std::function<std::unique_ptr<Estimate>(double)>(xa), std::function<std::unique_ptr<Estimate>(double)>(ap),
        std::function<std::unique_ptr<Estimate>(double)>(fp)}) {
    const auto low = make(0.3), mid = make(0.8), high = make(0.99), again = make(0.8);
    EXPECT_LE(low->listed(), mid->listed());
    EXPECT_LE(mid->listed(), high->listed());
    EXPECT_LT(low->listed(), high->listed());
    EXPECT_EQ(mid->bi.bytes, again->bi.bytes);
    EXPECT_EQ(mid->bc.bytes, again->bc.bytes);
    attend(c, *low);
    expect_sink_and_diagonal(*low);
  }
}

// The test's own AvgPool masses of row (h, i) for query head g, in double: softmax(block-mean query . block-mean key)
// over the causal key blocks; for the chunk's last query block, the last query's exact attention summed per key block.
std::vector<double> avgpool_mass(Chunk& c, int64_t bs, int64_t g, int64_t i) {
  const int64_t h = g / (c.Hq / c.Hk), NQB = (c.ctx + bs - 1) / bs;
  std::vector<double> s(static_cast<size_t>(i + 1), 0.0);
  if (i == NQB - 1) {
    std::vector<double> logit(static_cast<size_t>(c.ctx), 0.0);
    for (int64_t p = 0; p < c.ctx; ++p) {
      for (int64_t d = 0; d < c.D; ++d) logit[static_cast<size_t>(p)] += double{c.query(c.ctx - 1, g, d)} * c.key(p, h, d);
      logit[static_cast<size_t>(p)] *= c.scale();
    }
    const double m = *std::max_element(logit.begin(), logit.end());
    double sum = 0;
    for (double& x : logit) sum += (x = std::exp(x - m));
    for (int64_t p = 0; p < c.ctx; ++p) s[static_cast<size_t>(p / bs)] += logit[static_cast<size_t>(p)] / sum;
    return s;
  }
  std::vector<double> mq(static_cast<size_t>(c.D), 0.0);
  const int64_t r0 = std::max(i * bs, c.ctx - c.T), r1 = std::min((i + 1) * bs, c.ctx);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t d = 0; d < c.D; ++d) mq[static_cast<size_t>(d)] += c.query(r, g, d) / static_cast<double>(r1 - r0);
  for (int64_t j = 0; j <= i; ++j) {
    const int64_t p1 = std::min((j + 1) * bs, c.ctx);
    for (int64_t p = j * bs; p < p1; ++p)
      for (int64_t d = 0; d < c.D; ++d)
        s[static_cast<size_t>(j)] += mq[static_cast<size_t>(d)] * c.key(p, h, d) / static_cast<double>(p1 - j * bs);
    s[static_cast<size_t>(j)] *= c.scale();
  }
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - m));
  for (double& x : s) x /= sum;
  return s;
}

// The test's own AvgPool rank of row (h, i): over the group's query heads, the largest mass each causal key block gets.
std::vector<double> avgpool_group_rank(Chunk& c, int64_t bs, int64_t h, int64_t i) {
  std::vector<double> rank(static_cast<size_t>(i + 1), 0.0);
  const int64_t G = c.Hq / c.Hk;
  for (int64_t g = h * G; g < (h + 1) * G; ++g) {
    const std::vector<double> mass = avgpool_mass(c, bs, g, i);
    for (size_t j = 0; j < mass.size(); ++j) rank[j] = std::max(rank[j], mass[j]);
  }
  return rank;
}

// Issue 46: the token sampled after a prompt reads the last query's attention, and a block-mean query misses what one
// query attends (a needle the last prompt token retrieves). AvgPool scores the chunk's last query block by its last
// query's exact attention: a key that only the last query of one head attends is listed there, within a block budget
// too, while the block's other queries all point elsewhere (a decoy block their mean sees); the pooled rows still
// cover the threshold of the pooled masses.
TEST(PatternEstimators, AvgPoolScoresTheLastQueryBlockByItsLastQuery) {
  const int64_t bs = 16, needle = 6 * bs + 3, decoy = 2, g0 = 1;  // key blocks 6 and 2; query head 1 (KV head 0)
  std::mt19937 rng(19);
  Chunk c(400, 300, 4, 2, 32, rng);  // a chunk after a 100-token prefix; the last query block holds rows 384..399
  for (int64_t d = 0; d < c.D; ++d) c.key(needle, 0, d) = d == 5 ? 6.0f : 0.0f;
  c.query(c.ctx - 1, g0, 5) += 6.0f;  // one query of the block, one key of its block: both means diluted 16x
  for (int64_t p = decoy * bs; p < (decoy + 1) * bs; ++p) c.key(p, 0, 7) += 6.0f;
  for (int64_t p = 384; p + 1 < c.ctx; ++p) c.query(p, g0, 7) += 6.0f;
  c.upload();
  for (int64_t max_blocks : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(testing::Message() << "max_blocks " << max_blocks);
    Estimate e(c, bs);
    ops::avgpool_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.5, .max_blocks = max_blocks});
    attend(c, e);
    expect_sink_and_diagonal(e);
    EXPECT_TRUE(e.lists(0, e.NQB - 1, needle / bs));
    EXPECT_GT(avgpool_mass(c, bs, g0, e.NQB - 1)[needle / bs], 0.6);  // most of the last query's attention
    // A pooled row: the mass each listed block gets by the test's own reference covers the threshold.
    for (int64_t i = e.first; i + 1 < e.NQB; ++i)
      if (max_blocks == 0)
        for (int64_t g = 0; g < 2; ++g) {
          const std::vector<double> m = avgpool_mass(c, bs, g, i);
          double kept = 0;
          for (int32_t j : e.blocks(0, i)) kept += m[static_cast<size_t>(j)];
          EXPECT_GE(kept, 0.5 - 1e-6) << "query block " << i << " head " << g;
        }
  }
}

// kBlockBudget: on nearly flat attention a 0.9 threshold lists most blocks once a GQA group's choices are united; a
// budget of max_blocks keeps the sink, the diagonal and the best-ranked others. The block that one query head of the
// group needs (planted) survives (the rank is the group's max, not its mean); the budgeted lists are subsets of the
// unbudgeted ones (equal where those fit); attention runs on them; for AvgPool every kept block outranks every dropped
// one by the test's own double-precision masses.
TEST(PatternEstimators, BlockBudgetKeepsTheBlocksOneHeadOfTheGroupNeeds) {
  const int64_t bs = 16, qi = 20, kj = 7;
  std::mt19937 rng(18);
  Chunk c(400, 330, 8, 2, 32, rng, 0.05f);  // a chunk after a 70-token prefix, starting mid-block
  plant_hot_block(c, bs, qi, kj, 3);         // query head 3 of KV head 0's group (heads 0..3)
  c.upload();
  auto xattention = [&](Estimate& e, int64_t max_blocks) {
    ops::xattention_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(),
                             {.stride = 4, .threshold = 0.9, .max_blocks = max_blocks});
  };
  auto avgpool = [&](Estimate& e, int64_t max_blocks) {
    ops::avgpool_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.9, .max_blocks = max_blocks});
  };
  for (const auto& [name, run] : std::vector<std::pair<const char*, std::function<void(Estimate&, int64_t)>>>{
           {"xattention", xattention}, {"avgpool", avgpool}}) {
    Estimate free(c, bs);
    run(free, 0);
    EXPECT_GT(free.listed(), free.causal() / 2) << name << ": the flat data should list most blocks";
    for (int64_t max_blocks : {2, 3, 5, 1000}) {
      SCOPED_TRACE(testing::Message() << name << " max_blocks " << max_blocks);
      Estimate capped(c, bs);
      run(capped, max_blocks);
      attend(c, capped);
      expect_sink_and_diagonal(capped);
      if (max_blocks >= 3) {
        EXPECT_TRUE(capped.lists(0, qi, kj));
      }
      for (int64_t h = 0; h < c.Hk; ++h)
        for (int64_t i = capped.first; i < capped.NQB; ++i) {
          const std::vector<int32_t> got = capped.blocks(h, i), all = free.blocks(h, i);
          ASSERT_LE(static_cast<int64_t>(got.size()), max_blocks) << "head " << h << " block " << i;
          EXPECT_TRUE(std::includes(all.begin(), all.end(), got.begin(), got.end())) << "head " << h << " block " << i;
          if (static_cast<int64_t>(all.size()) <= max_blocks) {
            EXPECT_EQ(got, all) << "head " << h << " block " << i;
          }
          if (std::string(name) != "avgpool" || got == all) continue;
          const std::vector<double> rank = avgpool_group_rank(c, bs, h, i);
          double worst_kept = 1e300, best_dropped = 0;
          for (int32_t j : all) {
            if (j == 0 || j == i) continue;
            const bool kept = std::find(got.begin(), got.end(), j) != got.end();
            const double r = rank[static_cast<size_t>(j)];
            if (kept) worst_kept = std::min(worst_kept, r);
            if (!kept) best_dropped = std::max(best_dropped, r);
          }
          if (max_blocks > 2) {
            EXPECT_GE(worst_kept, best_dropped - 1e-6) << "head " << h << " block " << i;
          }
        }
    }
  }
  // A budget needs room for the sink and the diagonal, and a threshold that ranks.
  Estimate e(c, bs);
  EXPECT_THROW(ops::avgpool_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.9, .max_blocks = 1}),
               Error);
  EXPECT_THROW(ops::xattention_estimate(e.p, c.q.v, c.k_cache.v, c.meta, c.scale(),
                                        {.stride = 4, .threshold = 1.0, .max_blocks = 4}),
               Error);
}

TEST(PatternEstimators, RefusesBadArguments) {
  std::mt19937 rng(17);
  Chunk c(100, 40, 4, 2, 16, rng);
  c.upload();
  const float sc = c.scale();
  Estimate ok(c, 16, 16);
  EXPECT_THROW(ops::xattention_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, sc, {.stride = 5}),
               Error);  // 5 !| 16
  EXPECT_THROW(ops::xattention_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, sc, {.threshold = 0}), Error);
  EXPECT_THROW(ops::avgpool_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, sc, {.threshold = -1}), Error);
  EXPECT_THROW(ops::flexprefill_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, sc, {.gamma = 0}), Error);
  EXPECT_THROW(ops::vertical_slash_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, sc, {.last_q = 0}), Error);
  // Vertical-slash needs column lists wide enough for every chosen column.
  Estimate no_columns(c, 16);
  EXPECT_THROW(ops::vertical_slash_estimate(no_columns.p, c.q.v, c.k_cache.v, c.meta, sc, {.vertical = 8}), Error);
  Estimate narrow(c, 16, 15);  // 2 query heads per KV head x 8 verticals = 16
  EXPECT_THROW(ops::vertical_slash_estimate(narrow.p, c.q.v, c.k_cache.v, c.meta, sc, {.vertical = 8}), Error);
  EXPECT_NO_THROW(ops::vertical_slash_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, sc, {.vertical = 8}));
  // Block lists narrower than the query blocks.
  HostTensor narrow_bi(DType::kI32, {c.Hk, ok.NQB, ok.NQB - 1});
  Estimate w(c, 16);
  w.p.block_index = narrow_bi.v;
  EXPECT_THROW(ops::avgpool_estimate(w.p, c.q.v, c.k_cache.v, c.meta, sc, {}), Error);
  // Another block size than the lists were made for.
  Estimate other(c, 16);
  other.p.block_size = 32;
  EXPECT_THROW(ops::avgpool_estimate(other.p, c.q.v, c.k_cache.v, c.meta, sc, {}), Error);
  // Two sequences, or a context that disagrees with context_lens.
  AttentionMetadata two = c.meta;
  two.num_seqs = 2;
  EXPECT_THROW(ops::avgpool_estimate(ok.p, c.q.v, c.k_cache.v, two, sc, {}), Error);
  AttentionMetadata off = c.meta;
  off.max_context_len = 99;
  EXPECT_THROW(ops::avgpool_estimate(ok.p, c.q.v, c.k_cache.v, off, sc, {}), Error);
  EXPECT_THROW(ops::avgpool_estimate(ok.p, c.q.v, c.k_cache.v, c.meta, NAN, {}), Error);
}

}  // namespace
}  // namespace nanovllm
