// The GPU hot-page cache ops of offloaded sparse decode (kernels/page_cache_ops.h) on the CPU: a small
// scripted sequence of steps with every hit, miss, eviction and hand position written out by hand; the
// bookkeeping invariants over many random steps; the fetch moving exactly the planned rows (a hit must
// come from the cache, not the host); no-cache mode; the batched *_rows ops equal to one call per lane; and the
// argument checks.
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

// Random bytes (fp8 codes) of `shape`, and random f32 scales.
struct Fp8Rows {
  HostTensor codes, scales;
  // scale_shape: the scales' own shape (a host pool's head-major [Hk, N]); default the rows of `shape`.
  Fp8Rows(Shape shape, std::mt19937& rng, Shape scale_shape = {})
      : codes(DType::kF8E4M3, shape), scales(DType::kF32, scale_shape.ndim ? scale_shape : rows_of(shape)) {
    for (uint8_t& b : codes.bytes) b = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < scales.numel(); ++i) scales.v.data_as<float>()[i] = static_cast<float>(rng() % 1000);
  }
  static Shape rows_of(Shape s) {
    --s.ndim;
    return s;
  }
  KvCacheTensor view() const { return {codes.v, scales.v}; }
  // Lane `lane` of a tensor stacked along its first dimension (the lane's own shape).
  KvCacheTensor lane(int64_t lane) const {
    const int64_t n = codes.numel() / codes.v.dim(0), rows = scales.numel() / scales.v.dim(0);
    Shape one = codes.v.shape(), one_rows = scales.v.shape();
    for (int i = 0; i + 1 < one.ndim; ++i) one.dims[static_cast<size_t>(i)] = one[i + 1];
    for (int i = 0; i + 1 < one_rows.ndim; ++i) one_rows.dims[static_cast<size_t>(i)] = one_rows[i + 1];
    --one.ndim, --one_rows.ndim;
    return {TensorView(codes.v.data_as<uint8_t>() + lane * n, DType::kF8E4M3, one),
            TensorView(scales.v.data_as<float>() + lane * rows, DType::kF32, one_rows)};
  }
  bool same(const Fp8Rows& o) const { return codes.bytes == o.codes.bytes && scales.bytes == o.scales.bytes; }
};

// Three sequences of different lengths in lanes {2, 0, 3} of four, each row's pages straddling its host pool's end
// at a different place, a hot-page cache of exactly one selection (it wraps and evicts every step), fp8 rows: the
// batched plan and fetch give every lane exactly what one call per lane gives (plans, layer buffer, cache, state,
// counters), step after step.
TEST(PageCache, BatchedRowsEqualOneCallPerLane) {
  std::mt19937 rng(21);
  const int64_t lanes = 4, Hk = 2, D = 16, ps = 4, P = 16, N = P * ps, K = 3, C = 3;
  const std::vector<ops::PageCacheRow> rows{{.lane = 2, .host_tokens = 50}, {.lane = 0, .host_tokens = 17},
                                            {.lane = 3, .host_tokens = 33}};
  const auto B = static_cast<int64_t>(rows.size());
  // The batched side: stacked state, layer buffer and cache; one host pool per row.
  HostTensor page_slot(DType::kI32, {lanes, Hk, P}), slot_page(DType::kI32, {lanes, Hk, C});
  HostTensor stamp(DType::kI32, {lanes, Hk, C}), hand(DType::kI32, {lanes, Hk}), counters(DType::kI64, {2});
  const ops::PageCacheState stacked{page_slot.v, slot_page.v, stamp.v, hand.v};
  const auto lane_state = [&](int64_t l) -> ops::PageCacheState {
    return {TensorView(page_slot.i32() + l * Hk * P, DType::kI32, {Hk, P}),
            TensorView(slot_page.i32() + l * Hk * C, DType::kI32, {Hk, C}),
            TensorView(stamp.i32() + l * Hk * C, DType::kI32, {Hk, C}), TensorView(hand.i32() + l * Hk, DType::kI32, {Hk})};
  };
  for (int64_t l = 0; l < lanes; ++l) ops::page_cache_reset(lane_state(l), l == 0 ? counters.v : TensorView());
  Fp8Rows dst_k({lanes, N, Hk, D}, rng), dst_v({lanes, N, Hk, D}, rng);
  Fp8Rows cache_k({lanes, C, ps, Hk, D}, rng), cache_v({lanes, C, ps, Hk, D}, rng);
  std::vector<Fp8Rows> host_k, host_v;
  for (int64_t b = 0; b < B; ++b)  // the host pools' scales head-major
    host_k.emplace_back(Shape{N, Hk, D}, rng, Shape{Hk, N}), host_v.emplace_back(Shape{N, Hk, D}, rng, Shape{Hk, N});
  // The per-lane side: the same starting contents, one Cache per row.
  const auto copy = [](const Fp8Rows& from) {
    std::mt19937 unused;
    Fp8Rows to(from.codes.v.shape(), unused);
    to.codes.bytes = from.codes.bytes, to.scales.bytes = from.scales.bytes;
    return to;
  };
  Fp8Rows ref_dst_k = copy(dst_k), ref_dst_v = copy(dst_v), ref_cache_k = copy(cache_k), ref_cache_v = copy(cache_v);
  std::vector<Cache> ref;
  for (int64_t b = 0; b < B; ++b) ref.emplace_back(Hk, P, C);
  std::vector<KvCacheTensor> hk, hv;
  for (int64_t b = 0; b < B; ++b) hk.push_back(host_k[b].view()), hv.push_back(host_v[b].view());

  int64_t ref_hits = 0, ref_misses = 0;
  for (int32_t step = 0; step < 40; ++step) {
    std::vector<int32_t> flat;  // [B, Hk, K]: 1..K distinct increasing pages of the lane's first 10, -1 after
    for (int64_t i = 0; i < B * Hk; ++i) {
      std::vector<int32_t> pages(10);
      for (int32_t p = 0; p < 10; ++p) pages[p] = p;
      std::shuffle(pages.begin(), pages.end(), rng);
      const auto n = std::uniform_int_distribution<int64_t>(1, K)(rng);
      std::sort(pages.begin(), pages.begin() + n);
      for (int64_t k = 0; k < K; ++k) flat.push_back(k < n ? pages[k] : -1);
    }
    HostTensor sel = test::i32_tensor(flat, {B, Hk, K});
    HostTensor plan(DType::kI32, {B, Hk, K, 2});
    ops::page_cache_plan_rows(plan.v, sel.v, stacked, rows, ps, step, counters.v);
    ops::page_cache_fetch_rows(dst_k.view(), dst_v.view(), hk, hv, cache_k.view(), cache_v.view(), sel.v, plan.v,
                               rows);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t lane = rows[b].lane, tokens = rows[b].host_tokens;
      Cache& c = ref[b];
      HostTensor one_sel = test::i32_tensor({flat.begin() + b * Hk * K, flat.begin() + (b + 1) * Hk * K}, {1, Hk, K});
      HostTensor one_plan(DType::kI32, {1, Hk, K, 2});
      ops::page_cache_plan(one_plan.v, one_sel.v, c.state(), tokens, ps, step, c.counters.v);
      ops::page_cache_fetch(ref_dst_k.lane(lane), ref_dst_v.lane(lane), hk[b], hv[b], ref_cache_k.lane(lane),
                            ref_cache_v.lane(lane), one_sel.v, one_plan.v, tokens);
      EXPECT_TRUE(std::equal(one_plan.i32(), one_plan.i32() + Hk * K * 2, plan.i32() + b * Hk * K * 2))
          << "row " << b << " step " << step;
      EXPECT_TRUE(std::equal(c.page_slot.i32(), c.page_slot.i32() + Hk * P, page_slot.i32() + lane * Hk * P));
      EXPECT_TRUE(std::equal(c.slot_page.i32(), c.slot_page.i32() + Hk * C, slot_page.i32() + lane * Hk * C));
      EXPECT_TRUE(std::equal(c.hand.i32(), c.hand.i32() + Hk, hand.i32() + lane * Hk));
    }
    ASSERT_TRUE(dst_k.same(ref_dst_k) && dst_v.same(ref_dst_v)) << "step " << step;
    ASSERT_TRUE(cache_k.same(ref_cache_k) && cache_v.same(ref_cache_v)) << "step " << step;
  }
  for (const Cache& c : ref) ref_hits += c.hits(), ref_misses += c.misses();
  EXPECT_EQ(counters.v.data_as<int64_t>()[0], ref_hits);
  EXPECT_EQ(counters.v.data_as<int64_t>()[1], ref_misses);
  EXPECT_GT(ref_hits, 20);    // the cache served pages ...
  EXPECT_GT(ref_misses, 60);  // ... and evicted them again
  // Lane 1 is no row's: untouched.
  EXPECT_EQ(page_slot.i32()[1 * Hk * P], -1);
}

// The host pool's head-major scales: rows [start, start + T) of every head's row, nothing else; bad shapes refused.
TEST(PageCache, StoreScalesWritesTheHeadMajorCopy) {
  std::mt19937 rng(4);
  const int64_t Hk = 3, T = 5, cap = 12, start = 6;
  HostTensor src = test::random_tensor(DType::kF32, {T, Hk}, rng);
  HostTensor dst(DType::kF32, {Hk, cap});
  std::fill_n(dst.v.data_as<float>(), Hk * cap, -7.0f);
  ops::page_cache_store_scales(dst.v, src.v, start);
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t c = 0; c < cap; ++c) {
      const bool written = c >= start && c < start + T;
      EXPECT_EQ(dst.v.data_as<float>()[h * cap + c], written ? src.v.data_as<float>()[(c - start) * Hk + h] : -7.0f)
          << "head " << h << " column " << c;
    }
  EXPECT_THROW(ops::page_cache_store_scales(dst.v, src.v, cap - T + 1), Error);  // past the capacity
  HostTensor wrong_heads(DType::kF32, {Hk + 1, cap}), halves(DType::kBF16, {Hk, cap});
  EXPECT_THROW(ops::page_cache_store_scales(wrong_heads.v, src.v, 0), Error);
  EXPECT_THROW(ops::page_cache_store_scales(halves.v, src.v, 0), Error);
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
  // Batched: two rows of one lane, a lane past the stack, a row count the selection does not have.
  HostTensor ps2(DType::kI32, {2, 2, 10}), sp2(DType::kI32, {2, 2, 4}), st2(DType::kI32, {2, 2, 4});
  HostTensor h2(DType::kI32, {2, 2});
  const ops::PageCacheState two{ps2.v, sp2.v, st2.v, h2.v};
  HostTensor sel2 = test::i32_tensor({0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, {2, 2, 3});
  HostTensor plan2(DType::kI32, {2, 2, 3, 2});
  const std::vector<ops::PageCacheRow> shared{{.lane = 1, .host_tokens = 8}, {.lane = 1, .host_tokens = 8}};
  EXPECT_THROW(ops::page_cache_plan_rows(plan2.v, sel2.v, two, shared, 4, 0, big.counters.v), Error);
  const std::vector<ops::PageCacheRow> outside{{.lane = 0, .host_tokens = 8}, {.lane = 2, .host_tokens = 8}};
  EXPECT_THROW(ops::page_cache_plan_rows(plan2.v, sel2.v, two, outside, 4, 0, big.counters.v), Error);
  const std::vector<ops::PageCacheRow> one{{.lane = 0, .host_tokens = 8}};
  EXPECT_THROW(ops::page_cache_plan_rows(plan2.v, sel2.v, two, one, 4, 0, big.counters.v), Error);
}

}  // namespace
}  // namespace nanovllm
