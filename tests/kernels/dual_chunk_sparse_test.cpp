// The sparse attention ops with Dual Chunk Attention (docs/sparse_attention.md, "With Dual Chunk Attention") on the
// CPU, from random three-rotation queries q [3, T, Hq, D] and a paged cache the test fills:
//   - the block-sparse prefill kernel with every causal block listed, and sparse decode with every page selected, equal
//     dense dual_chunk_attention bit for bit (sequences over several chunks: intra, successive and inter keys);
//   - with real sparsity both equal an independent float64 reference over exactly the selected keys: one softmax over
//     them, each key scored with the rotation of its region (j in p's chunk, the previous one, or earlier);
//   - every estimator at its full threshold gives the full pattern (hence dense DCA), and at a low one scores each key
//     with its region's rotation: it finds a key block only the inter rotation sees, and leaves alone a decoy block
//     that only the intra rotation (wrongly applied to inter keys) would see;
//   - Quest's DCA score of a page bounds q_r . k for each of its keys with the key's region's rotation r, equals the
//     float64 bound over the regions the page meets (pages straddling a chunk boundary included), and is not the
//     one-rotation bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/pattern_estimators.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

// The test's region rule, written from the reference's ranges (vLLM _dual_chunk_flash_attn_prefill_func): the query's
// own chunk [cL, p], the previous one [(c-1)L, cL), everything before.
int region_of(int64_t p, int64_t j, int64_t L) {
  if (j >= p / L * L) return 0;
  if (j >= (p / L - 1) * L) return 1;
  return 2;
}

// One sequence of ctx positions in a paged cache (blocks shuffled, spare blocks of garbage); its last T positions are
// the chunk's queries, q3 [3, T, Hq, D].
struct DcaChunk {
  int64_t ctx, T, Hq, Hk, D, BS;
  ops::DualChunkParams dca;
  std::vector<int32_t> ids;
  HostTensor q3, k_cache, v_cache, cu, ctx_t, bt, slots;
  AttentionMetadata meta;

  DcaChunk(int64_t c, int64_t t, int64_t hq, int64_t hk, int64_t d, int64_t bs, int64_t L, DType dt, std::mt19937& rng)
      : ctx(c), T(t), Hq(hq), Hk(hk), D(d), BS(bs), dca{.chunk_len = L, .chunk_size = L + 3} {
    const int64_t blocks = (ctx + BS - 1) / BS, NB = blocks + 2;
    ids.resize(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<size_t>(blocks));
    q3 = test::random_tensor(dt, {3, T, Hq, D}, rng, -1.5f, 1.5f);
    k_cache = test::random_tensor(dt, {NB, BS, Hk, D}, rng, -1.5f, 1.5f);
    v_cache = test::random_tensor(dt, {NB, BS, Hk, D}, rng);
    std::vector<int32_t> slot_v;
    for (int64_t p = ctx - T; p < ctx; ++p) slot_v.push_back(static_cast<int32_t>(slot(p)));
    cu = test::i32_tensor({0, static_cast<int32_t>(T)});
    ctx_t = test::i32_tensor({static_cast<int32_t>(ctx)});
    bt = test::i32_tensor(ids, {1, blocks});
    slots = test::i32_tensor(slot_v);
    meta.num_seqs = 1;
    meta.num_tokens = meta.max_query_len = T;
    meta.max_context_len = ctx;
    meta.cu_seqlens_q = cu.v;
    meta.context_lens = ctx_t.v;
    meta.block_tables = bt.v;
    meta.slot_mapping = slots.v;
    meta.block_size = BS;
  }
  int64_t slot(int64_t p) const { return int64_t{ids[static_cast<size_t>(p / BS)]} * BS + p % BS; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
  double q(int r, int64_t t, int64_t g, int64_t d) const { return q3.get(((r * T + t) * Hq + g) * D + d); }
  double k(int64_t p, int64_t h, int64_t d) const { return k_cache.get((slot(p) * Hk + h) * D + d); }
  double v(int64_t p, int64_t h, int64_t d) const { return v_cache.get((slot(p) * Hk + h) * D + d); }
  void set_k(int64_t p, int64_t h, int64_t d, float x) { k_cache.set((slot(p) * Hk + h) * D + d, x); }
  void set_q(int r, int64_t t, int64_t g, int64_t d, float x) { q3.set(((r * T + t) * Hq + g) * D + d, x); }

  HostTensor dense() const {
    HostTensor out(q3.v.dtype(), {T, Hq, D});
    ops::dual_chunk_attention(out.v, q3.v, k_cache.v, v_cache.v, meta, dca, scale());
    return out;
  }
  // The float64 reference of row t, head g over the given key positions (<= its position): [D].
  std::vector<double> reference_row(int64_t t, int64_t g, const std::vector<int64_t>& keys,
                                    bool all_intra = false) const {
    const int64_t p = ctx - T + t, h = g / (Hq / Hk);
    std::vector<double> logit;
    for (int64_t j : keys) {
      const int r = all_intra ? 0 : region_of(p, j, dca.chunk_len);
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += q(r, t, g, d) * k(j, h, d);
      logit.push_back(s * scale());
    }
    const double m = *std::max_element(logit.begin(), logit.end());
    double sum = 0;
    for (double& x : logit) sum += (x = std::exp(x - m));
    std::vector<double> o(static_cast<size_t>(D), 0.0);
    for (size_t i = 0; i < keys.size(); ++i)
      for (int64_t d = 0; d < D; ++d) o[static_cast<size_t>(d)] += logit[i] / sum * v(keys[i], h, d);
    return o;
  }
};

// Pattern storage: every row's list NQB wide, columns `max_columns` wide (0: none).
struct Pattern {
  int64_t bs, Hk, NQB;
  HostTensor bc, bi, cc, ci;
  ops::BlockSparsePattern p;
  Pattern(const DcaChunk& c, int64_t block_size, int64_t max_columns = 0)
      : bs(block_size), Hk(c.Hk), NQB((c.ctx + block_size - 1) / block_size) {
    bc = HostTensor(DType::kI32, {Hk, NQB});
    bi = HostTensor(DType::kI32, {Hk, NQB, NQB});
    std::fill(bc.i32(), bc.i32() + bc.numel(), 0);
    std::fill(bi.i32(), bi.i32() + bi.numel(), -1);
    p.block_size = bs;
    p.block_counts = bc.v;
    p.block_index = bi.v;
    if (max_columns > 0) {
      cc = HostTensor(DType::kI32, {Hk, NQB});
      ci = HostTensor(DType::kI32, {Hk, NQB, max_columns});
      std::fill(cc.i32(), cc.i32() + cc.numel(), 0);
      std::fill(ci.i32(), ci.i32() + ci.numel(), -1);
      p.column_counts = cc.v;
      p.column_index = ci.v;
    }
  }
  void set_row(int64_t h, int64_t i, const std::vector<int32_t>& blocks, const std::vector<int32_t>& columns = {}) {
    bc.i32()[h * NQB + i] = static_cast<int32_t>(blocks.size());
    std::copy(blocks.begin(), blocks.end(), bi.i32() + (h * NQB + i) * NQB);
    if (columns.empty()) return;
    cc.i32()[h * NQB + i] = static_cast<int32_t>(columns.size());
    std::copy(columns.begin(), columns.end(), ci.i32() + (h * NQB + i) * ci.v.dim(2));
  }
  std::vector<int32_t> blocks(int64_t h, int64_t i) const {
    const int32_t* l = bi.v.data_as<const int32_t>() + (h * NQB + i) * NQB;
    return {l, l + bc.v.data_as<const int32_t>()[h * NQB + i]};
  }
  std::vector<int32_t> columns(int64_t h, int64_t i) const {
    if (!p.column_counts.defined()) return {};
    const int32_t* l = ci.v.data_as<const int32_t>() + (h * NQB + i) * ci.v.dim(2);
    return {l, l + cc.v.data_as<const int32_t>()[h * NQB + i]};
  }
  // Whether query block i of KV head h attends key position j.
  bool covers(int64_t h, int64_t i, int64_t j) const {
    const std::vector<int32_t> b = blocks(h, i), c = columns(h, i);
    return std::count(b.begin(), b.end(), j / bs) > 0 || std::count(c.begin(), c.end(), j) > 0;
  }
};

void expect_bitwise(const HostTensor& got, const HostTensor& want, const char* what) {
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.get(i), want.get(i)) << what << " element " << i;
}

struct Geometry {
  int64_t ctx, T, Hq, Hk, D, BS, L, bs;
  DType dt;
};
// Chunks after a prefix that cross chunk boundaries (several chunks before them: inter keys), a chunk starting
// mid-block, GQA 1 / 2 / 4, pattern blocks dividing L or not (the kernel does not need it), fp32 and bf16.
const Geometry kGeometries[] = {
    {.ctx = 75, .T = 30, .Hq = 4, .Hk = 2, .D = 8, .BS = 4, .L = 12, .bs = 6, .dt = DType::kF32},
    {.ctx = 61, .T = 61, .Hq = 3, .Hk = 3, .D = 16, .BS = 5, .L = 9, .bs = 5, .dt = DType::kF32},
    {.ctx = 97, .T = 17, .Hq = 8, .Hk = 2, .D = 8, .BS = 16, .L = 16, .bs = 8, .dt = DType::kBF16},
    {.ctx = 50, .T = 7, .Hq = 2, .Hk = 1, .D = 24, .BS = 3, .L = 7, .bs = 4, .dt = DType::kBF16},
};

TEST(DualChunkSparse, BlockSparseWithEveryCausalBlockIsDenseDcaBitForBit) {
  for (const Geometry& g : kGeometries) {
    std::mt19937 rng(static_cast<uint32_t>(g.ctx * 31 + g.T));
    DcaChunk c(g.ctx, g.T, g.Hq, g.Hk, g.D, g.BS, g.L, g.dt, rng);
    Pattern pt(c, g.bs);
    for (int64_t h = 0; h < g.Hk; ++h)
      for (int64_t i = 0; i < pt.NQB; ++i) {
        std::vector<int32_t> all(static_cast<size_t>(i + 1));
        std::iota(all.begin(), all.end(), 0);
        pt.set_row(h, i, all);
      }
    HostTensor out(g.dt, {g.T, g.Hq, g.D});
    ops::block_sparse_prefill_attention(out.v, c.q3.v, c.k_cache.v, c.v_cache.v, c.meta, pt.p, c.scale(), &c.dca);
    expect_bitwise(out, c.dense(), "block-sparse (every block) vs dense DCA");
  }
}

TEST(DualChunkSparse, BlockSparseMatchesFloat64ReferenceOfTheSelection) {
  for (const Geometry& g : kGeometries) {
    std::mt19937 rng(static_cast<uint32_t>(g.ctx * 7 + g.T));
    DcaChunk c(g.ctx, g.T, g.Hq, g.Hk, g.D, g.BS, g.L, g.dt, rng);
    Pattern pt(c, g.bs, /*max_columns=*/g.ctx);
    std::bernoulli_distribution keep(0.45), column(0.3);
    for (int64_t h = 0; h < g.Hk; ++h)
      for (int64_t i = 0; i < pt.NQB; ++i) {
        std::vector<int32_t> blocks, cols;
        for (int32_t j = 0; j <= i; ++j)
          if (j == i || keep(rng)) blocks.push_back(j);
        for (int32_t j = 0; j < i * g.bs; ++j)
          if (std::count(blocks.begin(), blocks.end(), j / g.bs) == 0 && column(rng)) cols.push_back(j);
        pt.set_row(h, i, blocks, cols);
      }
    HostTensor out(g.dt, {g.T, g.Hq, g.D});
    ops::block_sparse_prefill_attention(out.v, c.q3.v, c.k_cache.v, c.v_cache.v, c.meta, pt.p, c.scale(), &c.dca);
    std::vector<double> ref, one_rotation;
    for (int64_t t = 0; t < g.T; ++t)
      for (int64_t q = 0; q < g.Hq; ++q) {
        std::vector<int64_t> keys;
        const int64_t p = g.ctx - g.T + t, h = q / (g.Hq / g.Hk);
        for (int64_t j = 0; j <= p; ++j)
          if (pt.covers(h, p / g.bs, j)) keys.push_back(j);
        for (double x : c.reference_row(t, q, keys)) ref.push_back(x);
        for (double x : c.reference_row(t, q, keys, /*all_intra=*/true)) one_rotation.push_back(x);
      }
    if (g.dt == DType::kF32) {
      test::expect_close_f32(out, ref, "block-sparse DCA vs float64 reference");
    } else {  // bf16 output rounding: atol 1e-2 (design.md)
      EXPECT_LE(test::max_abs_err(out, ref), 1e-2);
    }
    EXPECT_GT(test::max_abs_err(out, one_rotation), 5e-2) << "the regions' rotations must matter here";
  }
}

// Every estimator at its full threshold (minference: every column and diagonal) gives the full causal pattern, and the
// block-sparse kernel over it is dense DCA bit for bit.
TEST(DualChunkSparse, EveryEstimatorAtItsFullThresholdGivesDenseDca) {
  std::mt19937 rng(11);
  DcaChunk c(/*ctx=*/90, /*T=*/40, /*hq=*/4, /*hk=*/2, /*d=*/8, /*bs=*/4, /*L=*/12, DType::kF32, rng);
  const HostTensor dense = c.dense();
  for (int e = 0; e < 4; ++e) {
    Pattern pt(c, /*block_size=*/6, /*max_columns=*/e == 1 ? c.ctx : 0);
    switch (e) {
      case 0:
        ops::xattention_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.stride = 3, .threshold = 1.0}, &c.dca);
        break;
      case 1:
        ops::vertical_slash_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(),
                                     {.last_q = 8, .vertical = c.ctx, .slash = c.ctx}, &c.dca);
        break;
      case 2:
        ops::flexprefill_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.gamma = 1.0}, &c.dca);
        break;
      case 3:
        ops::avgpool_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 1.0}, &c.dca);
        break;
    }
    HostTensor out(DType::kF32, {c.T, c.Hq, c.D});
    ops::block_sparse_prefill_attention(out.v, c.q3.v, c.k_cache.v, c.v_cache.v, c.meta, pt.p, c.scale(), &c.dca);
    SCOPED_TRACE(e);
    expect_bitwise(out, dense, "full-threshold estimate + block-sparse vs dense DCA");
  }
}

// ctx = 4 chunks of 32, the last chunk the queries, pattern blocks of 16. A hot key block in chunk 0 (inter for every
// query) that only the inter rotation sees, and a decoy block in chunk 1 (inter too) that only the intra and successive
// rotations would see. An estimator that scores each key with its region's rotation lists the hot block and not the
// decoy; one that used a single rotation would do the opposite.
TEST(DualChunkSparse, EstimatorsScoreEachKeyWithItsRegionsRotation) {
  constexpr int64_t L = 32, kHot = 1, kDecoy = 3, B = 16;
  std::mt19937 rng(5);
  DcaChunk c(/*ctx=*/4 * L, /*T=*/L, /*hq=*/2, /*hk=*/1, /*d=*/16, /*bs=*/8, L, DType::kF32, rng);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (int64_t p = 0; p < c.ctx; ++p)
    for (int64_t d = 0; d < c.D; ++d) c.set_k(p, 0, d, noise(rng));
  for (int64_t p = kHot * B; p < (kHot + 1) * B; ++p) c.set_k(p, 0, 0, 4.0f);
  for (int64_t p = kDecoy * B; p < (kDecoy + 1) * B; ++p) c.set_k(p, 0, 1, 4.0f);
  for (int r = 0; r < 3; ++r)
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t g = 0; g < c.Hq; ++g)
        for (int64_t d = 0; d < c.D; ++d) c.set_q(r, t, g, d, noise(rng));
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t g = 0; g < c.Hq; ++g) {
      c.set_q(2, t, g, 0, 6.0f);  // inter: the hot block
      c.set_q(0, t, g, 1, 6.0f);  // intra and successive: the decoy
      c.set_q(1, t, g, 1, 6.0f);
    }
  const char* names[] = {"xattention", "minference", "flexprefill", "avgpool"};
  for (int e = 0; e < 4; ++e) {
    SCOPED_TRACE(names[e]);
    Pattern pt(c, B, /*max_columns=*/e == 1 ? 2 * 17 : 0);
    switch (e) {
      case 0:
        ops::xattention_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.stride = 4, .threshold = 0.9}, &c.dca);
        break;
      case 1:
        ops::vertical_slash_estimate(
            pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(),
            {.last_q = 16, .vertical = 17, .slash = 4, .sink_tokens = 1, .recent_diagonals = 1}, &c.dca);
        break;
      case 2:
        ops::flexprefill_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.gamma = 0.9, .min_budget = B},
                                  &c.dca);
        break;
      case 3:
        ops::avgpool_estimate(pt.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.9}, &c.dca);
        break;
    }
    for (int64_t i = (c.ctx - c.T) / B; i < pt.NQB; ++i) {
      for (int64_t j = kHot * B; j < (kHot + 1) * B; ++j)
        EXPECT_TRUE(pt.covers(0, i, j)) << "hot key " << j << ", query block " << i;
      for (int64_t j = kDecoy * B; j < (kDecoy + 1) * B; ++j)
        EXPECT_FALSE(pt.covers(0, i, j)) << "decoy key " << j << ", query block " << i;
    }
    // The pattern is one the kernel accepts.
    HostTensor out(DType::kF32, {c.T, c.Hq, c.D});
    ops::block_sparse_prefill_attention(out.v, c.q3.v, c.k_cache.v, c.v_cache.v, c.meta, pt.p, c.scale(), &c.dca);
  }
}

TEST(DualChunkSparse, EstimatorsRefuseBlocksStraddlingChunksAndPlainQueries) {
  std::mt19937 rng(3);
  DcaChunk c(/*ctx=*/40, /*T=*/10, /*hq=*/2, /*hk=*/1, /*d=*/8, /*bs=*/4, /*L=*/12, DType::kF32, rng);
  Pattern bad(c, /*block_size=*/8);  // 8 does not divide 12
  EXPECT_THROW(ops::avgpool_estimate(bad.p, c.q3.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.5}, &c.dca), Error);
  Pattern ok(c, 6);
  HostTensor plain(DType::kF32, {c.T, c.Hq, c.D});
  EXPECT_THROW(ops::avgpool_estimate(ok.p, plain.v, c.k_cache.v, c.meta, c.scale(), {.threshold = 0.5}, &c.dca), Error);
  HostTensor out(DType::kF32, {c.T, c.Hq, c.D});
  EXPECT_THROW(
      ops::block_sparse_prefill_attention(out.v, plain.v, c.k_cache.v, c.v_cache.v, c.meta, ok.p, c.scale(), &c.dca),
      Error);
}

// A decode batch: S sequences (context lengths over several chunks), q3 [3, S, Hq, D], pages = cache blocks.
struct DcaDecode {
  int64_t S, Hq, Hk, D, BS, NB = 0, MB = 0;
  ops::DualChunkParams dca;
  std::vector<int32_t> ctx;
  HostTensor q3, k_cache, v_cache, bt, ctx_t, cu, slots;
  AttentionMetadata meta;
  DcaDecode(std::vector<int32_t> context, int64_t hq, int64_t hk, int64_t d, int64_t bs, int64_t L, DType dt,
            std::mt19937& rng)
      : S(static_cast<int64_t>(context.size())),
        Hq(hq),
        Hk(hk),
        D(d),
        BS(bs),
        dca{.chunk_len = L, .chunk_size = L + 5},
        ctx(std::move(context)) {
    for (int32_t c : ctx) {
      NB += (c + BS - 1) / BS;
      MB = std::max(MB, (c + BS - 1) / BS);
    }
    NB += 2;
    q3 = test::random_tensor(dt, {3, S, Hq, D}, rng);
    k_cache = test::random_tensor(dt, {NB, BS, Hk, D}, rng, -2.0f, 2.0f);
    v_cache = test::random_tensor(dt, {NB, BS, Hk, D}, rng);
    std::vector<int32_t> ids(static_cast<size_t>(NB)), table(static_cast<size_t>(S * MB), -1), cu_v{0}, slot_v;
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t p = 0; p < pages(s); ++p) table[static_cast<size_t>(s * MB + p)] = ids[next++];
      cu_v.push_back(static_cast<int32_t>(s + 1));
    }
    bt = test::i32_tensor(table, {S, MB});
    ctx_t = test::i32_tensor(ctx);
    cu = test::i32_tensor(cu_v);
    for (int64_t s = 0; s < S; ++s) slot_v.push_back(static_cast<int32_t>(slot(s, ctx[static_cast<size_t>(s)] - 1)));
    slots = test::i32_tensor(slot_v);
    meta.num_seqs = meta.num_tokens = S;
    meta.max_query_len = 1;
    meta.max_context_len = *std::max_element(ctx.begin(), ctx.end());
    meta.cu_seqlens_q = cu.v;
    meta.context_lens = ctx_t.v;
    meta.block_tables = bt.v;
    meta.slot_mapping = slots.v;
    meta.block_size = BS;
    meta.num_leading_decodes = S;
  }
  int64_t pages(int64_t s) const { return (ctx[static_cast<size_t>(s)] + BS - 1) / BS; }
  int64_t slot(int64_t s, int64_t p) const {
    return int64_t{bt.v.data_as<const int32_t>()[s * MB + p / BS]} * BS + p % BS;
  }
  double q(int r, int64_t s, int64_t g, int64_t d) const { return q3.get(((r * S + s) * Hq + g) * D + d); }
  double k(int64_t s, int64_t p, int64_t h, int64_t d) const { return k_cache.get((slot(s, p) * Hk + h) * D + d); }
  double v(int64_t s, int64_t p, int64_t h, int64_t d) const { return v_cache.get((slot(s, p) * Hk + h) * D + d); }
};

TEST(DualChunkSparse, QuestScoreBoundsEachKeyWithItsRegionsRotation) {
  std::mt19937 rng(9);
  // L = 10 with pages of 4: pages straddle chunk boundaries; contexts reach the inter region.
  DcaDecode b({37, 11, 52, 9}, /*hq=*/6, /*hk=*/2, /*d=*/12, /*bs=*/4, /*L=*/10, DType::kF32, rng);
  HostTensor k_min(DType::kF32, {b.NB, b.Hk, b.D}), k_max(DType::kF32, {b.NB, b.Hk, b.D});
  std::vector<int32_t> all;
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t p = 0; p < b.ctx[static_cast<size_t>(s)]; ++p) all.push_back(static_cast<int32_t>(b.slot(s, p)));
  const HostTensor all_slots = test::i32_tensor(all);
  ops::quest_update_pages(k_min.v, k_max.v, b.k_cache.v, all_slots.v);
  HostTensor scores(DType::kF32, {b.S, b.Hk, b.MB + 1}), plain(DType::kF32, {b.S, b.Hk, b.MB + 1});
  ops::quest_scores(scores.v, b.q3.v, k_min.v, k_max.v, b.bt.v, b.ctx_t.v, b.BS, &b.dca);
  const TensorView q_intra(b.q3.v.data(), DType::kF32, Shape{b.S, b.Hq, b.D});
  ops::quest_scores(plain.v, q_intra, k_min.v, k_max.v, b.bt.v, b.ctx_t.v, b.BS);
  const int64_t G = b.Hq / b.Hk, MP = b.MB + 1;
  int differ = 0;
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t h = 0; h < b.Hk; ++h)
      for (int64_t page = 0; page < MP; ++page) {
        const float got = scores.get((s * b.Hk + h) * MP + page);
        if (page >= b.pages(s)) {
          EXPECT_TRUE(std::isinf(got) && got < 0);
          continue;
        }
        const int64_t pq = b.ctx[static_cast<size_t>(s)] - 1;
        const int64_t first = page * b.BS, end = std::min<int64_t>(first + b.BS, pq + 1);
        std::set<int> regions;
        std::vector<double> lo(static_cast<size_t>(b.D), 1e30), hi(static_cast<size_t>(b.D), -1e30);
        for (int64_t j = first; j < end; ++j) {
          regions.insert(region_of(pq, j, b.dca.chunk_len));
          for (int64_t d = 0; d < b.D; ++d) {
            lo[static_cast<size_t>(d)] = std::min(lo[static_cast<size_t>(d)], b.k(s, j, h, d));
            hi[static_cast<size_t>(d)] = std::max(hi[static_cast<size_t>(d)], b.k(s, j, h, d));
          }
        }
        double want = -1e30, truth = -1e30;
        for (int64_t g = h * G; g < (h + 1) * G; ++g) {
          for (int r : regions) {
            double bound = 0;
            for (int64_t d = 0; d < b.D; ++d)
              bound +=
                  std::max(b.q(r, s, g, d) * lo[static_cast<size_t>(d)], b.q(r, s, g, d) * hi[static_cast<size_t>(d)]);
            want = std::max(want, bound);
          }
          for (int64_t j = first; j < end; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < b.D; ++d) dot += b.q(region_of(pq, j, b.dca.chunk_len), s, g, d) * b.k(s, j, h, d);
            truth = std::max(truth, dot);
          }
        }
        EXPECT_NEAR(got, want, 1e-4 * std::max(1.0, std::abs(want))) << s << "/" << h << "/" << page;
        EXPECT_GE(got, truth - 1e-4) << "the score bounds every key of the page with its region's rotation";
        differ += std::abs(got - plain.get((s * b.Hk + h) * MP + page)) > 1e-3 ? 1 : 0;
      }
  EXPECT_GT(differ, 0) << "pages outside the query's chunk must be scored with their own rotation";
}

TEST(DualChunkSparse, SparseDecodeEveryPageIsDenseDcaAndASubsetMatchesFloat64) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(dt == DType::kF32 ? 21 : 22);
    DcaDecode b({37, 11, 52, 9, 30}, /*hq=*/4, /*hk=*/2, /*d=*/16, /*bs=*/4, /*L=*/10, dt, rng);
    const int64_t K = b.MB;
    HostTensor every(DType::kI32, {b.S, b.Hk, K}), some(DType::kI32, {b.S, b.Hk, K});
    std::fill(every.i32(), every.i32() + every.numel(), -1);
    std::fill(some.i32(), some.i32() + some.numel(), -1);
    std::bernoulli_distribution keep(0.5);
    for (int64_t s = 0; s < b.S; ++s)
      for (int64_t h = 0; h < b.Hk; ++h) {
        int32_t n = 0;
        for (int32_t page = 0; page < b.pages(s); ++page) {
          every.i32()[(s * b.Hk + h) * K + page] = page;
          if (page == b.pages(s) - 1 || keep(rng)) some.i32()[(s * b.Hk + h) * K + n++] = page;
        }
      }
    HostTensor scratch(DType::kI32, {ops::sparse_decode_scratch_ints(b.S, b.Hk, K, b.BS)});
    HostTensor out(dt, {b.S, b.Hq, b.D}), dense(dt, {b.S, b.Hq, b.D});
    const float scale = 0.25f;
    ops::sparse_decode_attention(out.v, b.q3.v, b.k_cache.v, b.v_cache.v, b.bt.v, b.ctx_t.v, every.v, scale, scratch.v,
                                 &b.dca);
    ops::dual_chunk_attention(dense.v, b.q3.v, b.k_cache.v, b.v_cache.v, b.meta, b.dca, scale);
    expect_bitwise(out, dense, "sparse decode (every page) vs dense DCA");

    ops::sparse_decode_attention(out.v, b.q3.v, b.k_cache.v, b.v_cache.v, b.bt.v, b.ctx_t.v, some.v, scale, scratch.v,
                                 &b.dca);
    std::vector<double> ref;
    for (int64_t s = 0; s < b.S; ++s)
      for (int64_t g = 0; g < b.Hq; ++g) {
        const int64_t h = g / (b.Hq / b.Hk), pq = b.ctx[static_cast<size_t>(s)] - 1;
        std::vector<double> logit, vals;
        std::vector<int64_t> keys;
        for (int64_t i = 0; i < K; ++i) {
          const int32_t page = some.i32()[(s * b.Hk + h) * K + i];
          if (page < 0) break;
          for (int64_t j = page * b.BS; j < std::min<int64_t>((page + 1) * b.BS, pq + 1); ++j) keys.push_back(j);
        }
        for (int64_t j : keys) {
          double dot = 0;
          for (int64_t d = 0; d < b.D; ++d) dot += b.q(region_of(pq, j, b.dca.chunk_len), s, g, d) * b.k(s, j, h, d);
          logit.push_back(dot * scale);
        }
        const double m = *std::max_element(logit.begin(), logit.end());
        double sum = 0;
        for (double& x : logit) sum += (x = std::exp(x - m));
        for (int64_t d = 0; d < b.D; ++d) {
          double o = 0;
          for (size_t i = 0; i < keys.size(); ++i) o += logit[i] / sum * b.v(s, keys[i], h, d);
          ref.push_back(o);
        }
      }
    if (dt == DType::kF32) {
      test::expect_close_f32(out, ref, "sparse decode DCA vs float64 reference");
    } else {
      EXPECT_LE(test::max_abs_err(out, ref), 1e-2);
    }
  }
}

}  // namespace
}  // namespace nanovllm
