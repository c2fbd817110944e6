// block_sparse_prefill_attention (CPU reference): the full pattern against paged_attention bit for bit,
// sparse patterns (blocks and columns) against a naive masked softmax in double written here, and the
// validation of the pattern. The test owns the truth (contiguous K/V) and scatters it into a paged cache
// (block size 16) through a shuffled block table; unused slots hold large garbage.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

// One sequence: context ctx, its last T positions are the query rows.
struct PrefillChunk {
  int64_t ctx, T, Hq, Hk, D, BS = 16;
  std::vector<float> K, V;  // [ctx, Hk, D] as stored
  HostTensor q, k_cache, v_cache, cu, ctx_t, bt, slots;
  AttentionMetadata meta;

  PrefillChunk(int64_t c, int64_t t, int64_t hq, int64_t hk, int64_t d, DType dtype, std::mt19937& rng)
      : ctx(c), T(t), Hq(hq), Hk(hk), D(d) {
    const int64_t blocks = (ctx + BS - 1) / BS, NB = blocks + 2;
    k_cache = HostTensor(dtype, {NB, BS, Hk, D});
    v_cache = HostTensor(dtype, {NB, BS, Hk, D});
    for (int64_t i = 0; i < k_cache.numel(); ++i) {
      k_cache.set(i, 1000.0f);
      v_cache.set(i, -1000.0f);
    }
    std::vector<int32_t> ids(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<size_t>(blocks));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<int32_t> slot_v;
    for (int64_t p = 0; p < ctx; ++p) {
      const int64_t slot = int64_t{ids[static_cast<size_t>(p / BS)]} * BS + p % BS;
      for (int64_t i = 0; i < Hk * D; ++i) {
        k_cache.set(slot * Hk * D + i, u(rng));
        v_cache.set(slot * Hk * D + i, u(rng));
        K.push_back(k_cache.get(slot * Hk * D + i));
        V.push_back(v_cache.get(slot * Hk * D + i));
      }
      if (p >= ctx - T) slot_v.push_back(static_cast<int32_t>(slot));
    }
    q = test::random_tensor(dtype, {T, Hq, D}, rng);
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
};

// A pattern built from per (KV head, query block) lists; list entries past the counts hold garbage.
struct Pattern {
  int64_t bs, Hk, NQB;
  std::vector<std::vector<int32_t>> blocks, columns;  // [Hk * NQB] lists
  bool with_columns = false;
  HostTensor bc, bi, cc, ci;

  Pattern(int64_t block_size, int64_t hk, int64_t ctx)
      : bs(block_size), Hk(hk), NQB((ctx + block_size - 1) / block_size),
        blocks(static_cast<size_t>(hk * NQB)), columns(blocks.size()) {}
  std::vector<int32_t>& blocks_of(int64_t h, int64_t i) { return blocks[static_cast<size_t>(h * NQB + i)]; }
  std::vector<int32_t>& columns_of(int64_t h, int64_t i) { return columns[static_cast<size_t>(h * NQB + i)]; }

  static void pack(const std::vector<std::vector<int32_t>>& lists, int64_t Hk, int64_t NQB, HostTensor& counts,
                   HostTensor& index) {
    size_t width = 1;
    for (const auto& l : lists) width = std::max(width, l.size() + 1);  // + a garbage entry
    std::vector<int32_t> c, idx(lists.size() * width, 9999);
    for (size_t r = 0; r < lists.size(); ++r) {
      c.push_back(static_cast<int32_t>(lists[r].size()));
      std::copy(lists[r].begin(), lists[r].end(), idx.begin() + static_cast<std::ptrdiff_t>(r * width));
    }
    counts = test::i32_tensor(c, {Hk, NQB});
    index = test::i32_tensor(idx, {Hk, NQB, static_cast<int64_t>(width)});
  }
  ops::BlockSparsePattern view() {
    pack(blocks, Hk, NQB, bc, bi);
    ops::BlockSparsePattern p;
    p.block_size = bs;
    p.block_counts = bc.v;
    p.block_index = bi.v;
    if (with_columns) {
      pack(columns, Hk, NQB, cc, ci);
      p.column_counts = cc.v;
      p.column_index = ci.v;
    }
    return p;
  }
};

Pattern full_pattern(int64_t bs, int64_t Hk, int64_t ctx) {
  Pattern pt(bs, Hk, ctx);
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t i = 0; i < pt.NQB; ++i)
      for (int32_t j = 0; j <= i; ++j) pt.blocks_of(h, i).push_back(j);
  return pt;
}

// Per (head, query block): the diagonal block most of the time, block 0 (a sink) often, random other
// blocks, and (with columns) random positions outside the listed blocks; some rows then see nothing.
Pattern random_pattern(int64_t bs, int64_t Hk, int64_t ctx, bool with_columns, std::mt19937& rng) {
  Pattern pt(bs, Hk, ctx);
  pt.with_columns = with_columns;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t i = 0; i < pt.NQB; ++i) {
      auto& b = pt.blocks_of(h, i);
      for (int32_t j = 0; j <= i; ++j) {
        const double keep = j == i ? 0.8 : (j == 0 ? 0.6 : 0.3);
        if (u(rng) < keep) b.push_back(j);
      }
      if (!with_columns) continue;
      const int64_t end = std::min((i + 1) * bs, ctx);
      for (int64_t pos = 0; pos < end; ++pos)
        if (!std::binary_search(b.begin(), b.end(), static_cast<int32_t>(pos / bs)) && u(rng) < 0.15)
          pt.columns_of(h, i).push_back(static_cast<int32_t>(pos));
    }
  return pt;
}

// Naive masked softmax in double: row at position p of head g attends key j <= p where j's block is
// listed for (g's KV head, p / bs) or j is one of its columns. No key: zeros.
std::vector<double> naive_reference(const PrefillChunk& c, Pattern& pt, double scale) {
  std::vector<double> out(static_cast<size_t>(c.T * c.Hq * c.D), 0.0);
  const int64_t G = c.Hq / c.Hk;
  for (int64_t t = 0; t < c.T; ++t) {
    const int64_t p = c.ctx - c.T + t, i = p / pt.bs;
    for (int64_t g = 0; g < c.Hq; ++g) {
      const int64_t h = g / G;
      const auto& b = pt.blocks_of(h, i);
      const auto& cols = pt.columns_of(h, i);
      std::vector<int64_t> keys;
      for (int64_t j = 0; j <= p; ++j)
        if (std::find(b.begin(), b.end(), j / pt.bs) != b.end() ||
            (pt.with_columns && std::find(cols.begin(), cols.end(), j) != cols.end()))
          keys.push_back(j);
      if (keys.empty()) continue;
      std::vector<double> w;
      for (int64_t j : keys) {
        double dot = 0;
        for (int64_t d = 0; d < c.D; ++d)
          dot += double{c.q.get((t * c.Hq + g) * c.D + d)} * c.K[static_cast<size_t>((j * c.Hk + h) * c.D + d)];
        w.push_back(dot * scale);
      }
      const double m = *std::max_element(w.begin(), w.end());
      double den = 0;
      for (double& x : w) den += (x = std::exp(x - m));
      for (int64_t d = 0; d < c.D; ++d) {
        double acc = 0;
        for (size_t k = 0; k < keys.size(); ++k) acc += w[k] * c.V[static_cast<size_t>((keys[k] * c.Hk + h) * c.D + d)];
        out[static_cast<size_t>((t * c.Hq + g) * c.D + d)] = acc / den;
      }
    }
  }
  return out;
}

struct Case {
  int64_t ctx, T, Hq, Hk, D, bs;
  DType dtype;
};

std::string describe(const Case& k) {
  return "ctx=" + std::to_string(k.ctx) + " T=" + std::to_string(k.T) + " Hq=" + std::to_string(k.Hq) +
         " Hk=" + std::to_string(k.Hk) + " D=" + std::to_string(k.D) + " bs=" + std::to_string(k.bs) + " " +
         std::string(dtype_name(k.dtype));
}

// Odd lengths, chunks starting mid-block (T < ctx, ctx - T not a multiple of bs), a chunk on a block
// boundary, single rows, GQA 1 to 8, pattern blocks smaller than, equal to and larger than the cache's 16.
const std::vector<Case> kCases = {
    {301, 301, 8, 2, 32, 16, DType::kF32},  {301, 77, 4, 4, 24, 64, DType::kF32},
    {300, 172, 8, 1, 16, 128, DType::kF32}, {257, 129, 8, 8, 8, 64, DType::kBF16},
    {129, 1, 6, 3, 16, 16, DType::kF32},    {200, 37, 16, 2, 8, 128, DType::kBF16},
    {256, 128, 4, 2, 16, 64, DType::kF32},  {17, 17, 2, 1, 40, 16, DType::kF32},
};

TEST(BlockSparsePrefill, FullPatternEqualsPagedAttentionBitForBit) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(describe(k));
    std::mt19937 rng(static_cast<uint32_t>(k.ctx * 7 + k.T));
    PrefillChunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.dtype, rng);
    for (bool empty_columns : {false, true}) {
      Pattern pt = full_pattern(k.bs, k.Hk, k.ctx);
      pt.with_columns = empty_columns;
      HostTensor sparse(DType::kF32, {k.T, k.Hq, k.D}), dense(DType::kF32, {k.T, k.Hq, k.D});
      ops::block_sparse_prefill_attention(sparse.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, pt.view(), 0.25f);
      ops::paged_attention(dense.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, 0.25f);
      for (int64_t i = 0; i < dense.numel(); ++i) ASSERT_EQ(sparse.get(i), dense.get(i)) << "element " << i;
    }
  }
}

void check_against_naive(bool with_columns) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(describe(k));
    std::mt19937 rng(static_cast<uint32_t>(k.ctx * 13 + k.T + with_columns));
    PrefillChunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.dtype, rng);
    Pattern pt = random_pattern(k.bs, k.Hk, k.ctx, with_columns, rng);
    HostTensor out(DType::kF32, {k.T, k.Hq, k.D});
    const float scale = 0.3f;
    ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, pt.view(), scale);
    const std::vector<double> want = naive_reference(c, pt, scale);
    // fp32 scores and sums over <= 301 keys of inputs in [-1, 1]: per element well inside 2e-5.
    for (int64_t i = 0; i < out.numel(); ++i)
      ASSERT_NEAR(out.get(i), want[static_cast<size_t>(i)], 2e-5) << "element " << i;
  }
}

TEST(BlockSparsePrefill, SparseBlocksMatchNaiveMaskedSoftmax) { check_against_naive(false); }
TEST(BlockSparsePrefill, BlocksAndColumnsMatchNaiveMaskedSoftmax) { check_against_naive(true); }

// Columns only (no key block at all) and the diagonal: each row sees its own block plus vertical lines.
TEST(BlockSparsePrefill, VerticalLinesWithTheDiagonal) {
  std::mt19937 rng(11);
  PrefillChunk c(203, 150, 4, 2, 16, DType::kBF16, rng);
  Pattern pt(32, 2, 203);
  pt.with_columns = true;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < pt.NQB; ++i) {
      pt.blocks_of(h, i) = {static_cast<int32_t>(i)};
      for (int32_t col : {0, 1, 5 + static_cast<int32_t>(h), 40, 99, 150})
        if (col < i * 32) pt.columns_of(h, i).push_back(col);
    }
  HostTensor out(DType::kBF16, {150, 4, 16});
  ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, pt.view(), 0.25f);
  const std::vector<double> want = naive_reference(c, pt, 0.25);
  for (int64_t i = 0; i < out.numel(); ++i)  // bf16 output: half an ulp of values below 1
    ASSERT_NEAR(out.get(i), want[static_cast<size_t>(i)], 4e-3) << "element " << i;
}

TEST(BlockSparsePrefill, RowsWithoutKeysGetZeros) {
  std::mt19937 rng(2);
  PrefillChunk c(40, 40, 2, 1, 8, DType::kF32, rng);
  Pattern pt(16, 1, 40);  // query block 1 lists nothing; blocks 0 and 2 their diagonals
  pt.blocks_of(0, 0) = {0};
  pt.blocks_of(0, 2) = {2};
  HostTensor out = test::random_tensor(DType::kF32, {40, 2, 8}, rng);
  ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, pt.view(), 0.25f);
  for (int64_t t = 16; t < 32; ++t)
    for (int64_t i = 0; i < 16; ++i) ASSERT_EQ(out.get(t * 16 + i), 0.0f) << "row " << t;
  const std::vector<double> want = naive_reference(c, pt, 0.25);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_NEAR(out.get(i), want[static_cast<size_t>(i)], 2e-5);
}

TEST(BlockSparsePrefill, RejectsBadPatternsAndMetadata) {
  std::mt19937 rng(4);
  PrefillChunk c(70, 30, 4, 2, 8, DType::kF32, rng);  // rows 40..69: query blocks 2..4 of 16
  HostTensor out(DType::kF32, {30, 4, 8});
  auto run = [&](Pattern& pt) {
    ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, pt.view(), 1.0f);
  };
  auto good = [&] {
    Pattern pt = full_pattern(16, 2, 70);
    pt.with_columns = true;
    return pt;
  };
  {
    Pattern pt = good();
    pt.blocks_of(1, 0) = {7, 3, 3};  // query blocks before the chunk are ignored
    pt.columns_of(0, 1) = {500};
    EXPECT_NO_THROW(run(pt));
  }
  const auto expect_error = [&](Pattern& pt, const char* what) {
    try {
      run(pt);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  {
    Pattern pt = good();
    pt.blocks_of(1, 3) = {0, 2, 1};
    expect_error(pt, "increasing order");
  }
  {
    Pattern pt = good();
    pt.blocks_of(0, 2) = {0, 3};  // a future block
    expect_error(pt, "(causal)");
  }
  {
    Pattern pt = good();
    pt.blocks_of(0, 4) = {0, 4};
    pt.columns_of(0, 4) = {17, 66};  // 66 lies in the listed block 4
    expect_error(pt, "which block_index lists too");
  }
  {
    Pattern pt = good();
    pt.blocks_of(1, 2) = {2};
    pt.columns_of(1, 2) = {3, 48};  // past the query block's last position 47
    expect_error(pt, "column_index[1][2]");
  }
  {
    Pattern pt = good();
    ops::BlockSparsePattern v = pt.view();
    v.column_index = TensorView();  // counts without lists
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, v, 1.0f), Error);
    v = pt.view();
    v.block_counts.data_as<int32_t>()[2] = static_cast<int32_t>(v.block_index.dim(2)) + 1;  // past MAXB
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, v, 1.0f), Error);
    v = pt.view();
    v.block_size = 32;  // the lists are [2, 5]: 16-token blocks
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, v, 1.0f), Error);
    v.block_size = 0;
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, c.meta, v, 1.0f), Error);
    v = pt.view();
    AttentionMetadata m = c.meta;
    m.max_context_len = 71;
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, m, v, 1.0f), Error);
    m = c.meta;
    m.num_seqs = 2;
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, c.q.v, c.k_cache.v, c.v_cache.v, m, v, 1.0f), Error);
    HostTensor wide(DType::kF32, {30, 4, 16});
    EXPECT_THROW(ops::block_sparse_prefill_attention(out.v, wide.v, c.k_cache.v, c.v_cache.v, c.meta, v, 1.0f), Error);
  }
}

}  // namespace
}  // namespace nanovllm
