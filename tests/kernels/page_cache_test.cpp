// The GPU hot-page cache ops of offloaded sparse decode (kernels/page_cache_ops.h) on the CPU: a small
// scripted sequence of steps with every hit, miss, eviction and hand position written out by hand; the
// bookkeeping invariants over many random steps; the fetch moving exactly the planned rows (a hit must
// come from the cache, not the host); no-cache mode; and the argument checks.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/page_cache_ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

struct Cache {
  int64_t Hk, P, C;
  HostTensor page_slot, slot_page, stamp, hand, counters;
  Cache(int64_t hk, int64_t p, int64_t c)
      : Hk(hk), P(p), C(c), page_slot(DType::kI32, {hk, p}), slot_page(DType::kI32, {hk, c}),
        stamp(DType::kI32, {hk, c}), hand(DType::kI32, {hk}), counters(DType::kI64, {2}) {
    std::fill_n(page_slot.i32(), hk * p, 7);  // garbage the reset must clear
    std::fill_n(counters.v.data_as<int64_t>(), 2, 99);
    ops::page_cache_reset(state(), counters.v);
  }
  ops::PageCacheState state() const { return {page_slot.v, slot_page.v, stamp.v, hand.v}; }
  int64_t hits() const { return counters.v.data_as<int64_t>()[0]; }
  int64_t misses() const { return counters.v.data_as<int64_t>()[1]; }
};

// plan [1, Hk, K, 2] for `selected` (per head lists, -1 padded to K).
std::vector<int32_t> plan_step(Cache& c, const std::vector<std::vector<int32_t>>& selected, int64_t K,
                               int64_t host_tokens, int64_t ps, int32_t step) {
  std::vector<int32_t> flat;
  for (const auto& row : selected) {
    for (int32_t p : row) flat.push_back(p);
    for (size_t i = row.size(); i < static_cast<size_t>(K); ++i) flat.push_back(-1);
  }
  HostTensor sel = test::i32_tensor(flat, {1, c.Hk, K});
  HostTensor plan(DType::kI32, {1, c.Hk, K, 2});
  ops::page_cache_plan(plan.v, sel.v, c.state(), host_tokens, ps, step, c.counters.v);
  return {plan.i32(), plan.i32() + c.Hk * K * 2};
}

TEST(PageCache, ScriptedHitsMissesAndEvictions) {
  // 2 KV heads, 20 pages of 4 tokens, 4 slots; the host holds 50 tokens: pages 0..11 whole, page 12
  // straddles the end (uncached), pages 13+ are the caller's recent window (nothing to fetch).
  Cache c(2, 20, 4);
  EXPECT_EQ(c.hits(), 0);
  EXPECT_EQ(c.misses(), 0);
  EXPECT_EQ(c.page_slot.i32()[0], -1);
  auto plan = plan_step(c, {{0, 5, 12}, {1, 2, 13}}, 3, 50, 4, 0);
  EXPECT_EQ(plan, (std::vector<int32_t>{0, 1, 1, 1, -1, 1, /*head 1*/ 0, 1, 1, 1, -1, 0}));
  EXPECT_EQ(c.misses(), 4);
  EXPECT_EQ(c.hand.i32()[0], 2);
  // Page 0 hits slot 0; 7 and 9 take slots 2 and 3 (the hand wraps to 0).
  plan = plan_step(c, {{0, 7, 9}, {}}, 3, 50, 4, 1);
  EXPECT_EQ(std::vector<int32_t>(plan.begin(), plan.begin() + 6), (std::vector<int32_t>{0, 0, 2, 1, 3, 1}));
  EXPECT_EQ(c.hits(), 1);
  EXPECT_EQ(c.misses(), 6);
  EXPECT_EQ(c.hand.i32()[0], 0);
  // Slot 0 (page 0) was used at step 1, not now: page 11 evicts it although 0 was the last hit.
  plan = plan_step(c, {{5, 9, 11}, {}}, 3, 50, 4, 2);
  EXPECT_EQ(std::vector<int32_t>(plan.begin(), plan.begin() + 6), (std::vector<int32_t>{1, 0, 3, 0, 0, 1}));
  EXPECT_EQ(c.page_slot.i32()[0], -1);
  EXPECT_EQ(c.page_slot.i32()[11], 0);
  EXPECT_EQ(c.hand.i32()[0], 1);
  // The hand is at slot 1 (page 5), used now: page 0 skips it and slots 0 (11, used now) to take 2.
  plan = plan_step(c, {{0, 5, 11}, {}}, 3, 50, 4, 3);
  EXPECT_EQ(std::vector<int32_t>(plan.begin(), plan.begin() + 6), (std::vector<int32_t>{2, 1, 1, 0, 0, 0}));
  EXPECT_EQ(c.page_slot.i32()[7], -1);  // page 7 lived in slot 2
  EXPECT_EQ(c.slot_page.i32()[2], 0);
  EXPECT_EQ(c.hand.i32()[0], 3);
  // Head 1 kept its own slots all along.
  EXPECT_EQ(c.page_slot.i32()[20 + 1], 0);
  EXPECT_EQ(c.page_slot.i32()[20 + 2], 1);
}

TEST(PageCache, RandomStepsKeepTheBookkeepingConsistent) {
  std::mt19937 rng(5);
  const int64_t Hk = 3, P = 64, C = 12, K = 8, ps = 16;
  Cache c(Hk, P, C);
  std::vector<std::set<int32_t>> resident(Hk);  // what the cache holds, tracked here
  int64_t hits = 0, misses = 0;
  for (int32_t step = 0; step < 200; ++step) {
    const int64_t host_tokens = std::uniform_int_distribution<int64_t>(0, P * ps)(rng);
    std::vector<std::vector<int32_t>> sel(Hk);
    for (auto& row : sel) {
      std::vector<int32_t> pages(P);
      for (int32_t i = 0; i < P; ++i) pages[i] = i;
      std::shuffle(pages.begin(), pages.begin() + 24, rng);  // a hot set of 24 pages: hits happen
      const int64_t n = std::uniform_int_distribution<int64_t>(1, K)(rng);
      row.assign(pages.begin(), pages.begin() + n);
      std::sort(row.begin(), row.end());
    }
    const auto plan = plan_step(c, sel, K, host_tokens, ps, step);
    for (int64_t h = 0; h < Hk; ++h) {
      std::set<int32_t> slots;
      for (size_t k = 0; k < sel[h].size(); ++k) {
        const int32_t p = sel[h][k], slot = plan[(h * K + k) * 2], host = plan[(h * K + k) * 2 + 1];
        const bool cacheable = (p + 1) * ps <= host_tokens;
        if (p * ps >= host_tokens) {
          EXPECT_EQ(slot, -1);
          EXPECT_EQ(host, 0);
          continue;
        }
        if (!cacheable) {  // the straddling page
          EXPECT_EQ(slot, -1);
          EXPECT_EQ(host, 1);
          continue;
        }
        const bool was_resident = resident[h].count(p) > 0;
        EXPECT_EQ(host, was_resident ? 0 : 1) << "page " << p << " step " << step;
        (was_resident ? hits : misses) += 1;
        ASSERT_GE(slot, 0);
        EXPECT_TRUE(slots.insert(slot).second) << "slot " << slot << " given twice";
        EXPECT_EQ(c.page_slot.i32()[h * P + p], slot);
        EXPECT_EQ(c.slot_page.i32()[h * C + slot], p);
        EXPECT_EQ(c.stamp.i32()[h * C + slot], step);
      }
      // The cache now holds exactly the pages whose slot says so, page_slot its inverse.
      resident[h].clear();
      for (int64_t s = 0; s < C; ++s)
        if (const int32_t p = c.slot_page.i32()[h * C + s]; p >= 0) {
          resident[h].insert(p);
          EXPECT_EQ(c.page_slot.i32()[h * P + p], s);
        }
      EXPECT_EQ(static_cast<int64_t>(std::count_if(c.page_slot.i32() + h * P, c.page_slot.i32() + (h + 1) * P,
                                                   [](int32_t s) { return s >= 0; })),
                static_cast<int64_t>(resident[h].size()));
    }
  }
  EXPECT_EQ(c.hits(), hits);
  EXPECT_EQ(c.misses(), misses);
  EXPECT_GT(hits, 100);
  EXPECT_GT(misses, 100);
}

TEST(PageCache, FetchMovesThePlannedRowsAndHitsComeFromTheCache) {
  std::mt19937 rng(9);
  const int64_t Hk = 2, D = 8, ps = 4, N = 64, C = 4, K = 3, host_tokens = 30;  // page 7 straddles
  HostTensor host_k = test::random_tensor(DType::kBF16, {N, Hk, D}, rng);
  HostTensor host_v = test::random_tensor(DType::kBF16, {N, Hk, D}, rng);
  HostTensor dst_k = test::random_tensor(DType::kBF16, {N, Hk, D}, rng);
  HostTensor dst_v = test::random_tensor(DType::kBF16, {N, Hk, D}, rng);
  HostTensor cache_k = test::random_tensor(DType::kBF16, {C, ps, Hk, D}, rng);
  HostTensor cache_v = test::random_tensor(DType::kBF16, {C, ps, Hk, D}, rng);
  Cache c(Hk, N / ps, C);
  const auto row = [&](const HostTensor& t, int64_t tok, int64_t h) {
    return std::vector<uint16_t>(t.v.data_as<uint16_t>() + (tok * Hk + h) * D,
                                 t.v.data_as<uint16_t>() + (tok * Hk + h + 1) * D);
  };
  // Step 0: head 0 selects pages 1 and 7 (straddling: rows 28, 29 only), head 1 page 9 (past the host).
  const std::vector<int32_t> flat0{1, 7, -1, 9, -1, -1};
  HostTensor sel0 = test::i32_tensor(flat0, {1, Hk, K});
  HostTensor plan0(DType::kI32, {1, Hk, K, 2});
  ops::page_cache_plan(plan0.v, sel0.v, c.state(), host_tokens, ps, 0, c.counters.v);
  HostTensor before_k(DType::kBF16, {N, Hk, D});
  std::copy(dst_k.bytes.begin(), dst_k.bytes.end(), before_k.bytes.begin());
  ops::page_cache_fetch(dst_k.v, dst_v.v, host_k.v, host_v.v, cache_k.v, cache_v.v, sel0.v, plan0.v, host_tokens);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t h = 0; h < Hk; ++h) {  // head 0: page 1 (rows 4..7) and the straddling page 7's rows 28, 29
      const bool moved = h == 0 && ((t >= 4 && t < 8) || (t >= 28 && t < 30));
      EXPECT_EQ(row(dst_k, t, h), moved ? row(host_k, t, h) : row(before_k, t, h)) << "token " << t << " head " << h;
      if (moved) {
        EXPECT_EQ(row(dst_v, t, h), row(host_v, t, h));
      }
    }
  const int32_t slot1 = plan0.i32()[0];
  ASSERT_GE(slot1, 0);
  for (int64_t o = 0; o < ps; ++o) {
    EXPECT_EQ(row(cache_k, slot1 * ps + o, 0), row(host_k, 4 + o, 0));
    EXPECT_EQ(row(cache_v, slot1 * ps + o, 0), row(host_v, 4 + o, 0));
  }
  // Step 1: page 1 again, a hit. Scribble over its host rows and the layer buffer: the rows must come back
  // from the cache.
  const std::vector<uint16_t> original = row(host_k, 5, 0);
  for (int64_t t = 4; t < 8; ++t)
    for (int64_t h = 0; h < Hk; ++h) {
      std::fill_n(host_k.v.data_as<uint16_t>() + (t * Hk + h) * D, D, uint16_t{0x7f80});  // +inf
      std::fill_n(dst_k.v.data_as<uint16_t>() + (t * Hk + h) * D, D, uint16_t{0});
    }
  const std::vector<int32_t> flat1{1, -1, -1, -1, -1, -1};
  HostTensor sel1 = test::i32_tensor(flat1, {1, Hk, K});
  HostTensor plan1(DType::kI32, {1, Hk, K, 2});
  ops::page_cache_plan(plan1.v, sel1.v, c.state(), host_tokens, ps, 1, c.counters.v);
  EXPECT_EQ(plan1.i32()[0], slot1);
  EXPECT_EQ(plan1.i32()[1], 0);
  ops::page_cache_fetch(dst_k.v, dst_v.v, host_k.v, host_v.v, cache_k.v, cache_v.v, sel1.v, plan1.v, host_tokens);
  EXPECT_EQ(row(dst_k, 5, 0), original);
  EXPECT_EQ(c.hits(), 1);
  EXPECT_EQ(c.misses(), 1);  // page 1 at step 0; the straddling page 7 is not counted
}

TEST(PageCache, NoCacheFetchesEveryHostPage) {
  Cache c(1, 10, 0);
  auto plan = plan_step(c, {{0, 3, 9}}, 3, 38, 4, 0);  // page 9 = rows 36, 37: straddling
  EXPECT_EQ(plan, (std::vector<int32_t>{-1, 1, -1, 1, -1, 1}));
  plan = plan_step(c, {{0, 3, 9}}, 3, 38, 4, 1);
  EXPECT_EQ(plan, (std::vector<int32_t>{-1, 1, -1, 1, -1, 1}));
  EXPECT_EQ(c.hits(), 0);
  EXPECT_EQ(c.misses(), 4);
}

TEST(PageCache, RejectsBadArguments) {
  Cache c(2, 10, 2);
  HostTensor sel = test::i32_tensor({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  HostTensor plan(DType::kI32, {1, 2, 3, 2});
  EXPECT_THROW(ops::page_cache_plan(plan.v, sel.v, c.state(), 40, 4, 0, c.counters.v), Error);  // C < K
  Cache big(2, 10, 4);
  HostTensor wide(DType::kI32, {2});
  EXPECT_THROW(ops::page_cache_plan(plan.v, sel.v, big.state(), 40, 4, 0, wide.v), Error);      // counters dtype
  EXPECT_THROW(ops::page_cache_plan(plan.v, sel.v, big.state(), 41, 4, 0, big.counters.v), Error);  // > P pages
  HostTensor far = test::i32_tensor({0, 1, 10, 3, 4, 5}, {1, 2, 3});
  EXPECT_THROW(ops::page_cache_plan(plan.v, far.v, big.state(), 40, 4, 0, big.counters.v), Error);  // page 10
  HostTensor small_plan(DType::kI32, {1, 2, 2, 2});
  EXPECT_THROW(ops::page_cache_plan(small_plan.v, sel.v, big.state(), 40, 4, 0, big.counters.v), Error);
}

}  // namespace
}  // namespace nanovllm
