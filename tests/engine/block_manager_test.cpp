#include "nanovllm/engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>

#include "engine/test_util.h"
#include "nanovllm/core/error.h"

using namespace nanovllm;
using nanovllm::test::make_seq;
using nanovllm::test::random_tokens;

namespace {

// A sequence as Scheduler::add leaves it: with the hashes of its full blocks of bs tokens.
std::unique_ptr<Sequence> hashed_seq(int64_t id, std::vector<int32_t> tokens, int64_t bs) {
  auto s = make_seq(id, std::move(tokens));
  s->reset_block_hashes(bs);
  return s;
}

// Allocates, "computes" every token and commits: as the engine does after a full prefill.
void prefill(BlockManager& bm, Sequence& s) {
  ASSERT_TRUE(bm.can_allocate(s));
  bm.allocate(s);
  s.num_computed_tokens = s.num_tokens();
  bm.commit_full_blocks(s);
}

}  // namespace

TEST(BlockManager, SharedPrefixHitsAcrossSequences) {
  const int64_t bs = 4;
  BlockManager bm(32, bs);
  std::mt19937 rng(2);
  auto a_toks = random_tokens(rng, 3 * bs + 3);  // 3 full blocks + a partial one
  auto a = hashed_seq(1, a_toks, bs);
  prefill(bm, *a);
  EXPECT_EQ(a->num_cached_tokens, 0);
  EXPECT_EQ(a->block_table.size(), 4u);
  EXPECT_EQ(bm.num_cached_blocks(), 3);  // the partial block is never cached

  // B shares A's first 2 blocks exactly, then diverges inside block 2.
  auto b_toks = std::vector<int32_t>(a_toks.begin(), a_toks.begin() + 2 * bs + 1);
  b_toks.push_back(a_toks[2 * bs + 1] + 1);
  for (int i = 0; i < 5; ++i) b_toks.push_back(40000 + i);
  auto b = hashed_seq(2, b_toks, bs);
  ASSERT_TRUE(bm.can_allocate(*b));
  EXPECT_EQ(bm.num_prefix_hit_tokens(*b), 2 * bs);
  const int64_t free_before = bm.num_free_blocks();
  bm.allocate(*b);
  EXPECT_EQ(b->num_cached_tokens, 2 * bs);
  EXPECT_EQ(b->num_computed_tokens, 2 * bs);
  ASSERT_EQ(b->block_table.size(), 4u);  // 13 tokens
  EXPECT_EQ(b->block_table[0], a->block_table[0]);
  EXPECT_EQ(b->block_table[1], a->block_table[1]);
  EXPECT_NE(b->block_table[2], a->block_table[2]);
  EXPECT_EQ(bm.ref_count(a->block_table[0]), 2);
  EXPECT_EQ(bm.ref_count(a->block_table[2]), 1);
  EXPECT_EQ(free_before - bm.num_free_blocks(), 2);  // only the 2 fresh blocks came from the pool
  EXPECT_EQ(bm.stats().hit_tokens, 2 * bs);
  EXPECT_EQ(bm.stats().queried_tokens, a->num_tokens() + b->num_tokens());

  // Chain: C has A's block 1 tokens but a different block 0, so block 1 must not hit either.
  auto c_toks = a_toks;
  c_toks[0] += 1;
  auto c = hashed_seq(3, c_toks, bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*c), 0);
}

TEST(BlockManager, PartialBlocksNeverCachedAndLastTokenAlwaysComputed) {
  const int64_t bs = 4;
  BlockManager bm(32, bs);
  std::mt19937 rng(3);
  auto toks = random_tokens(rng, 2 * bs + 2);
  auto a = hashed_seq(1, toks, bs);
  prefill(bm, *a);
  EXPECT_EQ(bm.num_cached_blocks(), 2);

  // Same 10 tokens: the full blocks hit, the partial block does not.
  auto b = hashed_seq(2, toks, bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*b), 2 * bs);

  // Exactly the first 8 tokens: all would hit, but the last token must be computed, so the last block is
  // recomputed (into a fresh block) and only one block is served from the cache.
  auto c = hashed_seq(3, std::vector<int32_t>(toks.begin(), toks.begin() + 2 * bs), bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*c), bs);
  bm.allocate(*c);
  EXPECT_EQ(c->num_cached_tokens, bs);
  EXPECT_EQ(c->block_table[0], a->block_table[0]);
  EXPECT_NE(c->block_table[1], a->block_table[1]);

  // 9 tokens: both full blocks lie inside the first 8 and hit.
  auto d = hashed_seq(4, std::vector<int32_t>(toks.begin(), toks.begin() + 2 * bs + 1), bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*d), 2 * bs);

  // A sequence whose computed tokens end mid-block commits only the full blocks.
  BlockManager bm2(8, bs);
  auto e = hashed_seq(5, random_tokens(rng, 3 * bs), bs);
  bm2.allocate(*e);
  e->num_computed_tokens = bs + 3;
  bm2.commit_full_blocks(*e);
  EXPECT_EQ(bm2.num_cached_blocks(), 1);
  e->num_computed_tokens = 3 * bs;
  bm2.commit_full_blocks(*e);
  EXPECT_EQ(bm2.num_cached_blocks(), 3);
}

TEST(BlockManager, SharedBlocksFreedOnlyWhenAllOwnersFree) {
  const int64_t bs = 3;
  BlockManager bm(10, bs);
  std::mt19937 rng(4);
  auto toks = random_tokens(rng, 2 * bs + 2);
  auto a = hashed_seq(1, toks, bs);
  prefill(bm, *a);
  auto b = hashed_seq(2, toks, bs);
  bm.allocate(*b);
  ASSERT_EQ(b->num_cached_tokens, 2 * bs);
  EXPECT_EQ(bm.num_used_blocks(), 3 + 1);  // A: 3 blocks, B: 2 shared + 1 own
  const int32_t shared = a->block_table[0];

  bm.free(*a);
  EXPECT_TRUE(a->block_table.empty());
  EXPECT_EQ(bm.ref_count(shared), 1);
  EXPECT_EQ(bm.num_used_blocks(), 3);  // B's blocks; A's partial block went back
  bm.free(*b);
  EXPECT_EQ(bm.ref_count(shared), 0);
  EXPECT_EQ(bm.num_used_blocks(), 0);
  EXPECT_EQ(bm.num_free_blocks(), 10);
  EXPECT_EQ(bm.num_cached_blocks(), 2);  // lazily kept
}

TEST(BlockManager, FreedCachedBlockIsRevivedByALaterHit) {
  const int64_t bs = 4;
  BlockManager bm(6, bs);
  std::mt19937 rng(5);
  auto toks = random_tokens(rng, 2 * bs + 1);
  auto a = hashed_seq(1, toks, bs);
  prefill(bm, *a);
  const std::vector<int32_t> a_blocks = a->block_table;
  bm.free(*a);
  EXPECT_EQ(bm.num_free_blocks(), 6);

  auto b = hashed_seq(2, toks, bs);
  ASSERT_TRUE(bm.can_allocate(*b));
  bm.allocate(*b);
  EXPECT_EQ(b->num_cached_tokens, 2 * bs);
  EXPECT_EQ(b->block_table[0], a_blocks[0]);
  EXPECT_EQ(b->block_table[1], a_blocks[1]);
  EXPECT_EQ(bm.ref_count(a_blocks[0]), 1);
  EXPECT_EQ(bm.num_free_blocks(), 6 - 3);
}

TEST(BlockManager, LazyEvictionIsLeastRecentlyFreedFirstTailBlocksFirst) {
  const int64_t bs = 2;
  BlockManager bm(6, bs);
  // A and B: 2 full blocks + 1 token each -> 3 blocks each, 2 cached each.
  auto a = hashed_seq(1, {1, 2, 3, 4, 5}, bs);
  auto b = hashed_seq(2, {11, 12, 13, 14, 15}, bs);
  prefill(bm, *a);
  prefill(bm, *b);
  const auto a_blocks = a->block_table;
  const auto b_blocks = b->block_table;
  bm.free(*a);  // freed first: evicted first; its tail block before its head block
  bm.free(*b);
  EXPECT_EQ(bm.num_cached_blocks(), 4);

  // Fresh blocks come first from the uncached partial blocks, then A's block 1, A's block 0, B's...
  auto fresh = [&](int64_t id) {
    auto s = hashed_seq(id, {static_cast<int32_t>(100 + id)}, bs);
    bm.allocate(*s);
    return s;
  };
  auto x1 = fresh(10);
  auto x2 = fresh(11);
  std::set<int32_t> partials{a_blocks[2], b_blocks[2]};
  EXPECT_TRUE(partials.count(x1->block_table[0]) && partials.count(x2->block_table[0]));
  EXPECT_EQ(bm.num_cached_blocks(), 4);

  auto x3 = fresh(12);
  EXPECT_EQ(x3->block_table[0], a_blocks[1]);
  EXPECT_EQ(bm.num_cached_blocks(), 3);
  // A's first block still hits; its second is gone.
  EXPECT_EQ(bm.num_prefix_hit_tokens(*hashed_seq(20, {1, 2, 3, 4, 5}, bs)), bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*hashed_seq(21, {11, 12, 13, 14, 15}, bs)), 2 * bs);

  auto x4 = fresh(13);
  EXPECT_EQ(x4->block_table[0], a_blocks[0]);
  auto x5 = fresh(14);
  EXPECT_EQ(x5->block_table[0], b_blocks[1]);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*hashed_seq(22, {1, 2, 3, 4, 5}, bs)), 0);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*hashed_seq(23, {11, 12, 13, 14, 15}, bs)), bs);
}

TEST(BlockManager, ExhaustionLeavesStateUnchanged) {
  const int64_t bs = 4;
  BlockManager bm(3, bs);
  std::mt19937 rng(6);
  auto a = hashed_seq(1, random_tokens(rng, 2 * bs + 1), bs);
  prefill(bm, *a);
  EXPECT_EQ(bm.num_free_blocks(), 0);

  auto b = hashed_seq(2, random_tokens(rng, 1), bs);
  EXPECT_FALSE(bm.can_allocate(*b));
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_EQ(bm.num_cached_blocks(), 2);

  // A fills its last block: 12 tokens fit, the 13th needs a 4th block.
  a->num_computed_tokens = 2 * bs + 1;
  EXPECT_TRUE(bm.can_append(*a, bs - 1));
  EXPECT_FALSE(bm.can_append(*a, bs));

  // Once A is freed its cached blocks are reclaimable: a new 3-block sequence evicts them all.
  bm.free(*a);
  auto c = hashed_seq(3, random_tokens(rng, 2 * bs + 1), bs);
  prefill(bm, *c);
  EXPECT_EQ(bm.num_cached_blocks(), 2);
  EXPECT_EQ(bm.num_free_blocks(), 0);
}

TEST(BlockManager, HitsOnInUseBlocksNeedNoFreeBlocks) {
  const int64_t bs = 4;
  BlockManager bm(4, bs);
  std::mt19937 rng(7);
  auto toks = random_tokens(rng, 3 * bs);
  auto a = hashed_seq(1, toks, bs);
  prefill(bm, *a);  // 3 blocks, 1 free
  auto b_toks = std::vector<int32_t>(toks.begin(), toks.begin() + 2 * bs);
  b_toks.push_back(7);
  auto b = hashed_seq(2, b_toks, bs);  // 3 blocks: 2 hits in use + 1 fresh
  EXPECT_TRUE(bm.can_allocate(*b));
  b_toks.insert(b_toks.end(), {8, 9, 10, 11});
  auto c = hashed_seq(3, b_toks, bs);  // 4 blocks: 2 hits + 2 fresh, only 1 free
  EXPECT_FALSE(bm.can_allocate(*c));
  bm.allocate(*b);
  EXPECT_EQ(bm.num_free_blocks(), 0);
  EXPECT_EQ(bm.ref_count(a->block_table[1]), 2);
}

TEST(BlockManager, AppendSlotsGrowsOneBlockAtABoundary) {
  const int64_t bs = 4;
  BlockManager bm(8, bs);
  auto s = hashed_seq(1, {5, 6, 7, 8}, bs);
  bm.allocate(*s);
  EXPECT_EQ(s->block_table.size(), 1u);
  s->num_computed_tokens = 4;
  s->token_ids.push_back(9);
  bm.append_slots(*s, 1);
  EXPECT_EQ(s->block_table.size(), 2u);
  bm.append_slots(*s, 1);  // still room in block 1
  EXPECT_EQ(s->block_table.size(), 2u);
  bm.append_slots(*s, 9);  // 4 + 9 = 13 tokens -> 4 blocks
  EXPECT_EQ(s->block_table.size(), 4u);
  std::set<int32_t> distinct(s->block_table.begin(), s->block_table.end());
  EXPECT_EQ(distinct.size(), 4u);
}

TEST(BlockManager, DuplicateConcurrentBlocksKeepOneCacheEntry) {
  const int64_t bs = 4;
  BlockManager bm(8, bs);
  std::mt19937 rng(8);
  auto toks = random_tokens(rng, 2 * bs + 1);
  auto a = hashed_seq(1, toks, bs);
  auto b = hashed_seq(2, toks, bs);
  bm.allocate(*a);
  bm.allocate(*b);  // before A committed anything: no hits
  EXPECT_EQ(b->num_cached_tokens, 0);
  a->num_computed_tokens = b->num_computed_tokens = a->num_tokens();
  bm.commit_full_blocks(*a);
  bm.commit_full_blocks(*b);
  EXPECT_EQ(bm.num_cached_blocks(), 2);  // A registered first; B's identical blocks stay uncached
  const auto a_blocks = a->block_table;
  const auto b_blocks = b->block_table;
  bm.free(*b);
  bm.free(*a);
  auto c = hashed_seq(3, toks, bs);
  bm.allocate(*c);
  EXPECT_EQ(c->num_cached_tokens, 2 * bs);
  EXPECT_EQ(c->block_table[0], a_blocks[0]);
  EXPECT_EQ(c->block_table[1], a_blocks[1]);
  // Uncached blocks are reused first, most recently freed first (A's partial block, then B's 3 blocks,
  // whose duplicate hashes were never registered): none of that evicts the cached entries.
  EXPECT_EQ(c->block_table[2], a_blocks[2]);
  for (int i = 0; i < 3; ++i) {
    auto d = hashed_seq(10 + i, {1000 + i}, bs);
    bm.allocate(*d);
    EXPECT_EQ(d->block_table[0], b_blocks[i]);
  }
  EXPECT_EQ(bm.num_cached_blocks(), 2);
}

TEST(BlockManager, PrefixCachingOff) {
  const int64_t bs = 4;
  BlockManager bm(8, bs, /*enable_prefix_caching=*/false);
  std::mt19937 rng(9);
  auto toks = random_tokens(rng, 2 * bs + 1);
  auto a = hashed_seq(1, toks, bs);
  prefill(bm, *a);
  EXPECT_EQ(bm.num_cached_blocks(), 0);
  auto b = hashed_seq(2, toks, bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*b), 0);
  bm.allocate(*b);
  EXPECT_EQ(b->num_cached_tokens, 0);
  EXPECT_EQ(bm.num_used_blocks(), 6);
  bm.free(*a);
  bm.free(*b);
  EXPECT_EQ(bm.num_free_blocks(), 8);
  EXPECT_EQ(bm.stats().hit_tokens, 0);
}

TEST(BlockManager, BadConstructionThrows) {
  EXPECT_THROW(BlockManager(0, 16), Error);
  EXPECT_THROW(BlockManager(4, 0), Error);
}
