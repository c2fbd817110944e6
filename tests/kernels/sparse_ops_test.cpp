// The sparse decode ops against independent references: Quest metadata against min/max computed here,
// the Quest score against the true max q.k of every page (the bound), per-head selection on the seeds'
// head-averaging counter-example, page selection against a sort, and sparse attention against dense
// paged_attention (every page: bit-identical) and a double-precision softmax over the selected keys.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

// A decode batch over a paged cache: S sequences with the given context lengths, blocks shuffled, K/V
// random (the test's truth lives in the cache; spare blocks hold garbage no sequence owns).
struct DecodeBatch {
  int64_t S, Hq, Hk, D, BS, NB = 0, MB = 0;
  std::vector<int32_t> ctx;
  HostTensor q, k_cache, v_cache, block_tables, context_lens;

  DecodeBatch(std::vector<int32_t> context, int64_t hq, int64_t hk, int64_t d, int64_t bs, DType kv, std::mt19937& rng)
      : S(static_cast<int64_t>(context.size())), Hq(hq), Hk(hk), D(d), BS(bs), ctx(std::move(context)) {
    for (int32_t c : ctx) {
      NB += (c + BS - 1) / BS;
      MB = std::max(MB, (c + BS - 1) / BS + 1);
    }
    NB += 2;
    q = test::random_tensor(DType::kF32, {S, Hq, D}, rng);
    k_cache = test::random_tensor(kv, {NB, BS, Hk, D}, rng, -2.0f, 2.0f);
    v_cache = test::random_tensor(kv, {NB, BS, Hk, D}, rng);
    std::vector<int32_t> ids(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> bt(static_cast<size_t>(S * MB), -1);
    size_t next = 0;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t p = 0; p < pages(s); ++p) bt[static_cast<size_t>(s * MB + p)] = ids[next++];
    block_tables = test::i32_tensor(bt, {S, MB});
    context_lens = test::i32_tensor(ctx, {S});
  }
  int32_t block(int64_t s, int64_t page) const { return block_tables.v.data_as<const int32_t>()[s * MB + page]; }
  int64_t pages(int64_t s) const { return (ctx[static_cast<size_t>(s)] + BS - 1) / BS; }
  // Every sequence's slots in two steps: a prefill of all but the last 3 positions (with a skipped -1 slot), then
  // the rest one decode token at a time.
  std::pair<std::vector<int32_t>, std::vector<int32_t>> prefill_then_decodes() const {
    std::vector<int32_t> first, rest;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t c = ctx[static_cast<size_t>(s)];
      for (int64_t pos = 0; pos < c; ++pos)
        (pos < c - 3 ? first : rest)
            .push_back(block(s, pos / BS) * static_cast<int32_t>(BS) + static_cast<int32_t>(pos % BS));
    }
    first.push_back(-1);
    return {first, rest};
  }
  // Key (or value) of sequence s at position pos, KV head h, as stored.
  std::vector<double> key(const HostTensor& cache, int64_t s, int64_t pos, int64_t h) const {
    std::vector<double> k(static_cast<size_t>(D));
    const int64_t base = ((int64_t{block(s, pos / BS)} * BS + pos % BS) * Hk + h) * D;
    for (int64_t d = 0; d < D; ++d) k[static_cast<size_t>(d)] = cache.get(base + d);
    return k;
  }
};

// Quest metadata written in two steps (a prefill of all but the last 3 positions, then three decodes,
// with a skipped -1 slot) equals the min/max of every block's keys; the scores bound every q.k.
void check_quest_metadata_and_bound(DType kv) {
  std::mt19937 rng(7);
  DecodeBatch b({37, 5, 65}, /*hq=*/6, /*hk=*/2, /*d=*/24, /*bs=*/8, kv, rng);
  HostTensor k_min(kv, {b.NB, b.Hk, b.D}), k_max(kv, {b.NB, b.Hk, b.D});
  for (int64_t i = 0; i < k_min.numel(); ++i) {  // stale values of an earlier owner must not survive
    k_min.set(i, -100.0f);
    k_max.set(i, 100.0f);
  }
  const auto [first, rest] = b.prefill_then_decodes();
  HostTensor first_t = test::i32_tensor(first, {static_cast<int64_t>(first.size())});
  ops::quest_update_pages(k_min.v, k_max.v, b.k_cache.v, first_t.v);
  for (int32_t slot : rest) {
    HostTensor one = test::i32_tensor({slot}, {1});
    ops::quest_update_pages(k_min.v, k_max.v, b.k_cache.v, one.v);
  }
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t p = 0; p < b.pages(s); ++p)
      for (int64_t h = 0; h < b.Hk; ++h) {
        std::vector<double> lo(static_cast<size_t>(b.D), 1e30), hi(static_cast<size_t>(b.D), -1e30);
        for (int64_t pos = p * b.BS; pos < std::min<int64_t>((p + 1) * b.BS, b.ctx[static_cast<size_t>(s)]); ++pos) {
          const std::vector<double> k = b.key(b.k_cache, s, pos, h);
          for (int64_t d = 0; d < b.D; ++d) {
            lo[static_cast<size_t>(d)] = std::min(lo[static_cast<size_t>(d)], k[static_cast<size_t>(d)]);
            hi[static_cast<size_t>(d)] = std::max(hi[static_cast<size_t>(d)], k[static_cast<size_t>(d)]);
          }
        }
        const int64_t base = (int64_t{b.block(s, p)} * b.Hk + h) * b.D;
        for (int64_t d = 0; d < b.D; ++d) {
          ASSERT_EQ(k_min.get(base + d), lo[static_cast<size_t>(d)]) << "seq " << s << " page " << p << " d " << d;
          ASSERT_EQ(k_max.get(base + d), hi[static_cast<size_t>(d)]) << "seq " << s << " page " << p << " d " << d;
        }
      }

  const int64_t MP = b.MB;
  HostTensor scores(DType::kF32, {b.S, b.Hk, MP});
  ops::quest_scores(scores.v, b.q.v, k_min.v, k_max.v, b.block_tables.v, b.context_lens.v, b.BS);
  const int64_t G = b.Hq / b.Hk;
  int64_t single_key_pages = 0;
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t h = 0; h < b.Hk; ++h)
      for (int64_t p = 0; p < MP; ++p) {
        const float score = scores.get((s * b.Hk + h) * MP + p);
        if (p >= b.pages(s)) {
          EXPECT_EQ(score, -std::numeric_limits<float>::infinity());
          continue;
        }
        double best = -1e30;  // the true max of q_g . k over the group's heads and the page's keys
        for (int64_t g = 0; g < G; ++g)
          for (int64_t pos = p * b.BS; pos < std::min<int64_t>((p + 1) * b.BS, b.ctx[static_cast<size_t>(s)]); ++pos) {
            const std::vector<double> k = b.key(b.k_cache, s, pos, h);
            double dot = 0;
            for (int64_t d = 0; d < b.D; ++d) dot += b.q.get((s * b.Hq + h * G + g) * b.D + d) * k[static_cast<size_t>(d)];
            best = std::max(best, dot);
          }
        EXPECT_GE(score, best - 1e-4 * (1 + std::abs(best))) << "seq " << s << " head " << h << " page " << p;
        if (b.ctx[static_cast<size_t>(s)] == p * b.BS + 1) {  // one key: min = max, the bound is exact
          EXPECT_NEAR(score, best, 1e-4 * (1 + std::abs(best))) << "seq " << s << " head " << h;
          ++single_key_pages;
        }
      }
  EXPECT_EQ(single_key_pages, b.Hk);  // sequence 2's last page
}

TEST(QuestOps, MetadataIsTheBlockMinMaxAndScoresBoundEveryKeyF32) { check_quest_metadata_and_bound(DType::kF32); }
TEST(QuestOps, MetadataIsTheBlockMinMaxAndScoresBoundEveryKeyBf16) { check_quest_metadata_and_bound(DType::kBF16); }

// The keyscore policy's 4-bit keys (sparse_ops.h): rows written in two steps (a prefill with a skipped -1 slot, then
// single decodes) hold the contract's quantization, computed here in f32 from the stored key, which is also within
// half a step of the key; the scores are the max over the group's heads and the page's keys of the dequantized dot,
// recomputed in double.
void check_int4_keys(DType kv) {
  std::mt19937 rng(11);
  DecodeBatch b({37, 5, 70}, /*hq=*/6, /*hk=*/2, /*d=*/64, /*bs=*/8, kv, rng);
  HostTensor codes(DType::kU8, {b.NB, b.Hk, b.BS, b.D / 2}), scales(DType::kF32, {b.NB, b.Hk, b.BS});
  const auto [first, rest] = b.prefill_then_decodes();
  HostTensor first_t = test::i32_tensor(first, {static_cast<int64_t>(first.size())});
  ops::int4_keys_update(codes.v, scales.v, b.k_cache.v, first_t.v);
  for (int32_t slot : rest) {
    HostTensor one = test::i32_tensor({slot}, {1});
    ops::int4_keys_update(codes.v, scales.v, b.k_cache.v, one.v);
  }
  // code of dim d of the stored row r (row = (block Hk + h) BS + offset), -7..7
  const auto code = [&](int64_t r, int64_t d) {
    const uint8_t byte = codes.v.data_as<const uint8_t>()[r * (b.D / 2) + d / 2];
    return static_cast<int>(d % 2 == 0 ? byte & 15 : byte >> 4) - 8;
  };
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t pos = 0; pos < b.ctx[static_cast<size_t>(s)]; ++pos)
      for (int64_t h = 0; h < b.Hk; ++h) {
        const std::vector<double> k = b.key(b.k_cache, s, pos, h);
        float amax = 0.0f;
        for (const double x : k) amax = std::max(amax, std::fabs(static_cast<float>(x)));
        const float scale = amax / 7.0f;
        const int64_t r = (int64_t{b.block(s, pos / b.BS)} * b.Hk + h) * b.BS + pos % b.BS;
        ASSERT_EQ(scales.get(r), scale) << "seq " << s << " pos " << pos << " head " << h;
        for (int64_t d = 0; d < b.D; ++d) {
          const float want = std::clamp(std::nearbyint(static_cast<float>(k[static_cast<size_t>(d)]) / scale), -7.0f,
                                        7.0f);
          ASSERT_EQ(code(r, d), static_cast<int>(want)) << "seq " << s << " pos " << pos << " d " << d;
          EXPECT_LE(std::fabs(code(r, d) * double{scale} - k[static_cast<size_t>(d)]), 0.5001 * scale);
        }
      }

  const int64_t MP = b.MB, G = b.Hq / b.Hk;
  HostTensor scores(DType::kF32, {b.S, b.Hk, MP});
  ops::int4_key_scores(scores.v, b.q.v, codes.v, scales.v, b.block_tables.v, b.context_lens.v, b.BS);
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t h = 0; h < b.Hk; ++h)
      for (int64_t p = 0; p < MP; ++p) {
        const float score = scores.get((s * b.Hk + h) * MP + p);
        if (p >= b.pages(s)) {
          EXPECT_EQ(score, -std::numeric_limits<float>::infinity());
          continue;
        }
        double best = -1e30;
        for (int64_t pos = p * b.BS; pos < std::min<int64_t>((p + 1) * b.BS, b.ctx[static_cast<size_t>(s)]); ++pos) {
          const int64_t r = (int64_t{b.block(s, p)} * b.Hk + h) * b.BS + pos % b.BS;
          for (int64_t g = 0; g < G; ++g) {
            double dot = 0;
            for (int64_t d = 0; d < b.D; ++d) dot += b.q.get((s * b.Hq + h * G + g) * b.D + d) * code(r, d);
            best = std::max(best, dot * scales.get(r));
          }
        }
        EXPECT_NEAR(score, best, 1e-5 * (1 + std::abs(best))) << "seq " << s << " head " << h << " page " << p;
      }
}

TEST(Int4KeyOps, CodesQuantizeEachKeyRowAndScoresAreTheBestDequantizedDotF32) { check_int4_keys(DType::kF32); }
TEST(Int4KeyOps, CodesQuantizeEachKeyRowAndScoresAreTheBestDequantizedDotBf16) { check_int4_keys(DType::kBF16); }

// Why keyscore exists (docs/sparse_attention.md, "Quest at 128K"): every page holds keys of wide spread, so Quest's
// bound (sum_d max(q_d min_d, q_d max_d)) of any page exceeds the one key that matches the query; the 4-bit scores
// rank that key's page first.
TEST(Int4KeyOps, KeyScoresFindTheMatchingKeyWhereQuestsBoundCannot) {
  std::mt19937 rng(5);
  const int64_t pages = 40, BS = 16, D = 64, needle_page = 23;
  DecodeBatch b({static_cast<int32_t>(pages * BS)}, /*hq=*/1, /*hk=*/1, D, BS, DType::kF32, rng);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) b.q.set(d, q[static_cast<size_t>(d)] = n(rng));
  for (int64_t pos = 0; pos < pages * BS; ++pos) {
    const int64_t base = (int64_t{b.block(0, pos / BS)} * BS + pos % BS) * D;
    const bool needle = pos == needle_page * BS + 5;
    for (int64_t d = 0; d < D; ++d) b.k_cache.set(base + d, needle ? 0.6f * q[static_cast<size_t>(d)] : n(rng));
  }
  std::vector<int32_t> all(static_cast<size_t>(pages * BS));
  for (int64_t pos = 0; pos < pages * BS; ++pos)
    all[static_cast<size_t>(pos)] = b.block(0, pos / BS) * static_cast<int32_t>(BS) + static_cast<int32_t>(pos % BS);
  const HostTensor slots = test::i32_tensor(all);
  HostTensor codes(DType::kU8, {b.NB, 1, BS, D / 2}), scales(DType::kF32, {b.NB, 1, BS});
  HostTensor k_min(DType::kF32, {b.NB, 1, D}), k_max(DType::kF32, {b.NB, 1, D});
  ops::int4_keys_update(codes.v, scales.v, b.k_cache.v, slots.v);
  ops::quest_update_pages(k_min.v, k_max.v, b.k_cache.v, slots.v);
  HostTensor key_scores(DType::kF32, {1, 1, b.MB}), quest(DType::kF32, {1, 1, b.MB});
  ops::int4_key_scores(key_scores.v, b.q.v, codes.v, scales.v, b.block_tables.v, b.context_lens.v, BS);
  ops::quest_scores(quest.v, b.q.v, k_min.v, k_max.v, b.block_tables.v, b.context_lens.v, BS);
  const auto rank_of_needle = [&](const HostTensor& sc) {
    int64_t higher = 0;
    for (int64_t p = 0; p < pages; ++p) higher += sc.get(p) > sc.get(needle_page);
    return higher;
  };
  EXPECT_EQ(rank_of_needle(key_scores), 0);
  EXPECT_GT(rank_of_needle(quest), 0) << "the setting should defeat Quest's bound";
}

// The seeds' counter-example to head-averaged scores: KV head 0 needs page 2 (a key aligned with its
// query), head 1 needs page 3. Page 2 is strongly negative for head 1, so the head average ranks page 3
// first and a shared selection of one middle page would drop head 0's page. Per head, both are kept.
TEST(QuestOps, EachHeadKeepsThePageItNeedsWhereTheHeadAverageWouldNot) {
  const int64_t Hk = 2, D = 4, BS = 4, pages = 7, ctx = pages * BS;
  HostTensor q(DType::kF32, {1, Hk, D}), k_cache(DType::kF32, {pages, BS, Hk, D}), v_cache(DType::kF32, {pages, BS, Hk, D});
  for (int64_t i = 0; i < k_cache.numel(); ++i) {
    k_cache.set(i, 0.01f * static_cast<float>(i % 7));
    v_cache.set(i, 0.0f);
  }
  for (int64_t d = 0; d < D; ++d) {
    q.set(d, d == 0 ? 1.0f : 0.0f);      // head 0 looks along d = 0
    q.set(D + d, d == 1 ? 1.0f : 0.0f);  // head 1 along d = 1
  }
  auto key = [&](int64_t page, int64_t off, int64_t h, int64_t d) { return ((page * BS + off) * Hk + h) * D + d; };
  k_cache.set(key(2, 1, 0, 0), 10.0f);   // head 0: page 2 scores 10
  for (int64_t off = 0; off < BS; ++off) k_cache.set(key(2, off, 1, 1), -12.0f);  // head 1: page 2 scores -12
  k_cache.set(key(3, 2, 1, 1), 3.0f);    // head 1: page 3 scores 3
  std::vector<int32_t> bt(static_cast<size_t>(pages));
  std::iota(bt.begin(), bt.end(), 0);
  HostTensor block_tables = test::i32_tensor(bt, {1, pages}), context_lens = test::i32_tensor({static_cast<int32_t>(ctx)}, {1});
  HostTensor k_min(DType::kF32, {pages, Hk, D}), k_max(DType::kF32, {pages, Hk, D});
  std::vector<int32_t> slots(static_cast<size_t>(ctx));
  std::iota(slots.begin(), slots.end(), 0);
  HostTensor slot_mapping = test::i32_tensor(slots, {ctx});
  ops::quest_update_pages(k_min.v, k_max.v, k_cache.v, slot_mapping.v);
  HostTensor scores(DType::kF32, {1, Hk, pages});
  ops::quest_scores(scores.v, q.v, k_min.v, k_max.v, block_tables.v, context_lens.v, BS);
  // The counter-example holds: averaged over heads, page 3 beats page 2.
  const auto avg = [&](int64_t p) { return (scores.get(p) + scores.get(pages + p)) / 2; };
  ASSERT_GT(avg(3), avg(2));
  HostTensor selected(DType::kI32, {1, Hk, 4});  // sink 1 + recent 2 + one selected page
  ops::select_pages(selected.v, scores.v, context_lens.v, BS, 1, 2);
  const int32_t* sel = selected.i32();
  EXPECT_EQ(std::vector<int32_t>(sel, sel + 4), (std::vector<int32_t>{0, 2, 5, 6}));      // head 0
  EXPECT_EQ(std::vector<int32_t>(sel + 4, sel + 8), (std::vector<int32_t>{0, 3, 5, 6}));  // head 1
}

// select_pages against a full sort: sink and recent pages, then the best middle pages, increasing order.
TEST(QuestOps, SelectPagesKeepsSinkRecentAndTheTopScores) {
  std::mt19937 rng(11);
  const int64_t S = 4, Hk = 3, BS = 5, MP = 40, K = 9, sink = 1, recent = 2;
  const std::vector<int32_t> ctx{3, 45, 44, 200};  // 1 page; exactly K pages; 9 pages (K); 40 pages
  HostTensor scores = test::random_tensor(DType::kF32, {S, Hk, MP}, rng);
  for (int64_t i = 0; i < 6; ++i) scores.set(MP + 10 + i, 0.5f);  // ties in sequence 1 / head 0
  HostTensor context_lens = test::i32_tensor(ctx, {S}), selected(DType::kI32, {S, Hk, K});
  ops::select_pages(selected.v, scores.v, context_lens.v, BS, sink, recent);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < Hk; ++h) {
      const int64_t pages = (ctx[static_cast<size_t>(s)] + BS - 1) / BS;
      std::vector<int32_t> want;
      if (pages <= K) {
        for (int32_t p = 0; p < pages; ++p) want.push_back(p);
      } else {
        std::vector<int32_t> mid;
        for (int32_t p = sink; p < pages - recent; ++p) mid.push_back(p);
        std::stable_sort(mid.begin(), mid.end(), [&](int32_t a, int32_t c) {
          return scores.get((s * Hk + h) * MP + a) > scores.get((s * Hk + h) * MP + c);
        });
        mid.resize(static_cast<size_t>(K - sink - recent));
        for (int32_t p = 0; p < sink; ++p) want.push_back(p);
        want.insert(want.end(), mid.begin(), mid.end());
        for (int64_t p = pages - recent; p < pages; ++p) want.push_back(static_cast<int32_t>(p));
        std::sort(want.begin(), want.end());
      }
      want.resize(static_cast<size_t>(K), -1);
      const int32_t* got = selected.i32() + (s * Hk + h) * K;
      EXPECT_EQ(std::vector<int32_t>(got, got + K), want) << "seq " << s << " head " << h;
    }
}

// Every page selected: exactly paged_attention's decode values (the CPU kernels share their arithmetic).
void check_full_selection_equals_dense(DType kv, int64_t hq, int64_t hk, int64_t d, int64_t bs) {
  std::mt19937 rng(static_cast<uint32_t>(hq * 100 + d + bs));
  DecodeBatch b({1, 17, 3 * static_cast<int32_t>(bs), 70}, hq, hk, d, bs, kv, rng);
  const int64_t K = b.MB;
  std::vector<int32_t> sel(static_cast<size_t>(b.S * b.Hk * K), -1);
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t h = 0; h < b.Hk; ++h)
      for (int64_t p = 0; p < b.pages(s); ++p) sel[static_cast<size_t>((s * b.Hk + h) * K + p)] = static_cast<int32_t>(p);
  HostTensor selected = test::i32_tensor(sel, {b.S, b.Hk, K});
  HostTensor sparse_out(DType::kF32, {b.S, b.Hq, b.D}), dense_out(DType::kF32, {b.S, b.Hq, b.D});
  HostTensor scratch(DType::kI32, {ops::sparse_decode_scratch_ints(b.S, b.Hk, K, b.BS)});
  ops::sparse_decode_attention(sparse_out.v, b.q.v, b.k_cache.v, b.v_cache.v, b.block_tables.v, b.context_lens.v,
                               selected.v, 0.3f, scratch.v);
  std::vector<int32_t> cu(static_cast<size_t>(b.S + 1));
  std::iota(cu.begin(), cu.end(), 0);
  HostTensor cu_t = test::i32_tensor(cu, {b.S + 1});
  HostTensor no_store = test::i32_tensor(std::vector<int32_t>(static_cast<size_t>(b.S), -1), {b.S});
  AttentionMetadata meta;
  meta.num_seqs = b.S;
  meta.num_tokens = b.S;
  meta.max_query_len = 1;
  meta.max_context_len = 70;
  meta.cu_seqlens_q = cu_t.v;
  meta.context_lens = b.context_lens.v;
  meta.block_tables = b.block_tables.v;
  meta.slot_mapping = no_store.v;
  meta.block_size = b.BS;
  meta.num_leading_decodes = b.S;
  ops::paged_attention(dense_out.v, b.q.v, b.k_cache.v, b.v_cache.v, meta, 0.3f);
  for (int64_t i = 0; i < dense_out.numel(); ++i) ASSERT_EQ(sparse_out.get(i), dense_out.get(i)) << "element " << i;
}

TEST(SparseDecodeAttention, EveryPageSelectedEqualsDenseBitForBit) {
  check_full_selection_equals_dense(DType::kF32, 8, 2, 64, 16);
  check_full_selection_equals_dense(DType::kBF16, 6, 3, 40, 5);
  check_full_selection_equals_dense(DType::kF32, 3, 3, 17, 7);
}

// A partial selection against softmax over exactly the selected keys, in double precision.
TEST(SparseDecodeAttention, AttendsExactlyTheSelectedKeys) {
  std::mt19937 rng(5);
  for (DType kv : {DType::kF32, DType::kBF16}) {
    DecodeBatch b({61, 9, 40}, /*hq=*/4, /*hk=*/2, /*d=*/33, /*bs=*/6, kv, rng);
    const int64_t K = 5;
    // Per (seq, head) lists: some pages dropped, the last (partial) page kept, different per head.
    const std::vector<std::vector<int32_t>> lists{{0, 3, 4, 9, 10}, {1, 2, 10}, {0, 1}, {1}, {0, 2, 5, 6}, {4, 6}};
    std::vector<int32_t> sel(static_cast<size_t>(b.S * b.Hk * K), -1);
    for (size_t i = 0; i < lists.size(); ++i)
      std::copy(lists[i].begin(), lists[i].end(), sel.begin() + static_cast<std::ptrdiff_t>(i) * K);
    HostTensor selected = test::i32_tensor(sel, {b.S, b.Hk, K});
    HostTensor out(DType::kF32, {b.S, b.Hq, b.D});
    const float scale = 0.2f;
    HostTensor scratch(DType::kI32, {ops::sparse_decode_scratch_ints(b.S, b.Hk, K, b.BS)});
    ops::sparse_decode_attention(out.v, b.q.v, b.k_cache.v, b.v_cache.v, b.block_tables.v, b.context_lens.v,
                                 selected.v, scale, scratch.v);
    const int64_t G = b.Hq / b.Hk;
    for (int64_t s = 0; s < b.S; ++s)
      for (int64_t h = 0; h < b.Hk; ++h) {
        std::vector<int64_t> positions;
        for (int32_t p : lists[static_cast<size_t>(s * b.Hk + h)])
          for (int64_t pos = p * b.BS; pos < std::min<int64_t>((p + 1) * b.BS, b.ctx[static_cast<size_t>(s)]); ++pos)
            positions.push_back(pos);
        for (int64_t g = 0; g < G; ++g) {
          const int64_t qh = h * G + g;
          std::vector<double> logits;
          for (int64_t pos : positions) {
            const std::vector<double> k = b.key(b.k_cache, s, pos, h);
            double dot = 0;
            for (int64_t d = 0; d < b.D; ++d) dot += b.q.get((s * b.Hq + qh) * b.D + d) * k[static_cast<size_t>(d)];
            logits.push_back(dot * scale);
          }
          const double m = *std::max_element(logits.begin(), logits.end());
          double denom = 0;
          for (double& l : logits) denom += (l = std::exp(l - m));
          for (int64_t d = 0; d < b.D; ++d) {
            double want = 0;
            for (size_t j = 0; j < positions.size(); ++j)
              want += logits[j] / denom * b.key(b.v_cache, s, positions[j], h)[static_cast<size_t>(d)];
            EXPECT_NEAR(out.get((s * b.Hq + qh) * b.D + d), want, 2e-5) << "seq " << s << " head " << qh;
          }
        }
      }
  }
}

TEST(SparseDecodeAttention, RejectsBadSelections) {
  std::mt19937 rng(3);
  DecodeBatch b({20}, 2, 1, 8, 4, DType::kF32, rng);  // 5 pages
  HostTensor out(DType::kF32, {1, 2, 8});
  auto run = [&](std::vector<int32_t> list) {
    const int64_t K = static_cast<int64_t>(list.size());
    HostTensor sel = test::i32_tensor(list, {1, 1, K});
    HostTensor scratch(DType::kI32, {ops::sparse_decode_scratch_ints(1, 1, K, 4)});
    ops::sparse_decode_attention(out.v, b.q.v, b.k_cache.v, b.v_cache.v, b.block_tables.v, b.context_lens.v, sel.v,
                                 1.0f, scratch.v);
  };
  EXPECT_NO_THROW(run({0, 4, -1}));
  EXPECT_THROW(run({-1, -1}), Error);   // empty
  EXPECT_THROW(run({3, 1, -1}), Error); // not increasing
  EXPECT_THROW(run({0, 5}), Error);     // past the context's 5 pages
  HostTensor scores(DType::kF32, {1, 1, 5}), sel(DType::kI32, {1, 1, 3});
  EXPECT_THROW(ops::select_pages(sel.v, scores.v, b.context_lens.v, 4, 1, 3), Error);  // sink + recent > budget
  EXPECT_THROW(ops::select_pages(sel.v, scores.v, b.context_lens.v, 4, 1, 0), Error);  // no recent page
}

}  // namespace
}  // namespace nanovllm
