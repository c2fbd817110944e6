// Prefix-cache block hashes: the chain formula (block_hash.h), and each sequence's chain, computed once
// per block as blocks fill and only read by the block manager and the scheduler.
#include "nanovllm/engine/block_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "engine/test_util.h"
#include "nanovllm/engine/block_manager.h"
#include "nanovllm/engine/scheduler.h"

using namespace nanovllm;
using nanovllm::test::make_seq;
using nanovllm::test::random_tokens;

namespace {

// Independent chain, one entry per full block of `toks`: XXH64 over [the previous entry as 8
// little-endian bytes (not for block 0)] + the block's int32 tokens, seed 0.
// A nonzero salt goes before block 0's tokens as if it were a previous entry.
std::vector<uint64_t> ref_chain(const std::vector<int32_t>& toks, int64_t bs, uint64_t salt = 0) {
  std::vector<uint64_t> chain;
  uint64_t h = salt;
  for (int64_t i = 0; (i + 1) * bs <= static_cast<int64_t>(toks.size()); ++i) {
    std::vector<unsigned char> buf;
    if (i > 0 || salt != 0)
      for (int b = 0; b < 8; ++b) buf.push_back(static_cast<unsigned char>((h >> (8 * b)) & 0xFF));
    for (int64_t j = 0; j < bs; ++j) {
      const uint32_t t = static_cast<uint32_t>(toks[i * bs + j]);
      for (int b = 0; b < 4; ++b) buf.push_back(static_cast<unsigned char>((t >> (8 * b)) & 0xFF));
    }
    h = XXH64(buf.data(), buf.size(), 0);
    chain.push_back(h);
  }
  return chain;
}

SamplingParams max_tokens(int64_t n) {
  SamplingParams p;
  p.max_tokens = n;
  return p;
}

// Every scheduled sequence's chain is its tokens' chain: hashed at add(), extended as blocks fill.
void expect_chains(const SchedulerOutput& out, int64_t bs) {
  for (const ScheduledSequence& ss : out.seqs)
    EXPECT_EQ(ss.seq->block_hashes(), ref_chain(ss.seq->token_ids, bs)) << "request " << ss.seq->seq_id;
}

// One synchronous step whose "model" samples 500 + position.
SchedulerOutput step(Scheduler& s, int64_t bs) {
  SchedulerOutput out = s.schedule();
  expect_chains(out, bs);
  std::vector<SampledToken> sampled;
  for (const ScheduledSequence& ss : out.seqs)
    if (ss.sample) sampled.push_back({ss.seq->seq_id, static_cast<int32_t>(500 + ss.seq->num_tokens()), {}});
  s.update(out, sampled);
  expect_chains(out, bs);
  return out;
}

}  // namespace

TEST(BlockHash, MatchesIndependentChain) {
  std::mt19937 rng(1);
  const auto toks = random_tokens(rng, 3 * 5, -7, 1 << 30);  // negative ids too: raw int32 bytes
  const std::vector<uint64_t> want = ref_chain(toks, 5);
  ASSERT_EQ(want.size(), 3u);
  uint64_t h = 0;
  for (int64_t i = 0; i < 3; ++i) {
    h = hash_block(h, i > 0, toks.data() + i * 5, 5);
    EXPECT_EQ(h, want[static_cast<size_t>(i)]) << "block " << i;
  }
}

TEST(SequenceBlockHashes, GrowAsBlocksFillAndKeepEarlierEntries) {
  const int64_t bs = 4;
  std::mt19937 rng(2);
  auto seq = make_seq(1, random_tokens(rng, 2 * bs + 1));
  seq->reset_block_hashes(bs);
  ASSERT_EQ(seq->block_hashes().size(), 2u);
  EXPECT_EQ(seq->block_hashes(), ref_chain(seq->token_ids, bs));
  for (int32_t i = 0; i < 3 * bs; ++i) {
    const std::vector<uint64_t> before = seq->block_hashes();
    seq->token_ids.push_back(kPendingToken);  // scheduled ahead: sampled, not read yet
    seq->extend_block_hashes();
    EXPECT_EQ(seq->block_hashes(), before) << "a block ending in a pending token is hashed later";
    seq->token_ids.back() = 100 + i;
    seq->extend_block_hashes();
    EXPECT_EQ(seq->block_hashes().size(), seq->token_ids.size() / bs);
    EXPECT_TRUE(std::equal(before.begin(), before.end(), seq->block_hashes().begin()));
    EXPECT_EQ(seq->block_hashes(), ref_chain(seq->token_ids, bs));
  }
  seq->reset_block_hashes(0);  // prefix caching off: no chain
  seq->extend_block_hashes();
  EXPECT_TRUE(seq->block_hashes().empty());
}

TEST(SequenceBlockHashes, SaltSeparatesOtherwiseEqualPrompts) {
  // Dual Chunk Attention salts a long prompt's chain with its length (ModelConfig::dual_chunk_attention.
  // prefix_cache_salt): its cached keys carry that length's factor.
  const int64_t bs = 4;
  std::mt19937 rng(3);
  const auto toks = random_tokens(rng, 3 * bs);
  auto plain = make_seq(1, toks);
  auto salted = make_seq(2, toks);
  salted->cache_salt = 12;
  plain->reset_block_hashes(bs);
  salted->reset_block_hashes(bs);
  EXPECT_EQ(salted->block_hashes(), ref_chain(toks, bs, 12));
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(salted->block_hashes()[i], plain->block_hashes()[i]);
  salted->token_ids.push_back(9);  // extended the same way
  for (int i = 0; i < 3; ++i) salted->token_ids.push_back(10 + i);
  salted->extend_block_hashes();
  EXPECT_EQ(salted->block_hashes(), ref_chain(salted->token_ids, bs, 12));
}

// The block manager reads a sequence's hashes and never computes its own: one without them (or with
// another block size's) is a bug it stops at rather than hashing the prefix again.
TEST(SequenceBlockHashesDeathTest, BlockManagerOnlyReadsThem) {
  const int64_t bs = 4;
  BlockManager bm(8, bs);
  auto seq = make_seq(1, {1, 2, 3, 4, 5, 6});
  EXPECT_DEATH(bm.num_prefix_hit_tokens(*seq), "block hashes");
  seq->reset_block_hashes(2 * bs);
  EXPECT_DEATH(bm.can_allocate(*seq), "block hashes");
  seq->reset_block_hashes(bs);
  EXPECT_EQ(bm.num_prefix_hit_tokens(*seq), 0);
}

// A long prompt that waits for blocks over many steps keeps the chain add() computed (every admission
// check reads it), decodes extend chains as blocks fill, and preemption by recompute keeps them.
TEST(SchedulerBlockHashes, HashedOnceAtAddExtendedByDecodesKeptThroughPreemption) {
  const int64_t bs = 2;
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = 64;
  c.model.max_model_len = 64;
  c.cache.block_size = bs;
  c.cache.num_kv_blocks = 9;  // 18 slots: two sequences growing to 13 tokens cannot both stay
  Scheduler s(c, {});
  std::mt19937 rng(3);
  s.add(make_seq(1, random_tokens(rng, 5), max_tokens(8)));
  s.add(make_seq(2, random_tokens(rng, 5), max_tokens(8)));
  auto waiting = make_seq(3, random_tokens(rng, 15), max_tokens(2));  // 8 blocks: waits for the others
  const Sequence* w = waiting.get();
  s.add(std::move(waiting));
  const std::vector<uint64_t> w_chain = w->block_hashes();
  EXPECT_EQ(w_chain, ref_chain(w->token_ids, bs));

  int steps_waiting = 0;
  std::vector<std::unique_ptr<Sequence>> done;  // keeps `w` alive
  for (int i = 0; i < 200 && s.has_unfinished(); ++i) {
    step(s, bs);
    if (w->status == SequenceStatus::kWaiting && w->num_computed_tokens == 0) {
      ++steps_waiting;
      EXPECT_EQ(w->block_hashes(), w_chain);
    }
    for (auto& f : s.take_finished()) done.push_back(std::move(f));
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_GT(steps_waiting, 3);
  EXPECT_GT(s.num_preemptions(), 0);
}

// Scheduling ahead: advance() appends a placeholder, which is hashed only once resolve() reads it.
TEST(SchedulerBlockHashes, PendingTokenHashedWhenResolved) {
  const int64_t bs = 4;
  EngineConfig c;
  c.model.max_model_len = 64;
  c.cache.block_size = bs;
  c.cache.num_kv_blocks = 16;
  Scheduler s(c, {});
  s.add(make_seq(1, {1, 2, 3, 4, 5, 6, 7}, max_tokens(10)));  // the first sampled token fills block 1
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  const Sequence& q = *out.seqs[0].seq;
  s.advance(out);
  ASSERT_EQ(q.token_ids.back(), kPendingToken);
  EXPECT_EQ(q.block_hashes().size(), 1u);
  s.resolve(out, {{1, 8, {}}});
  EXPECT_EQ(q.block_hashes().size(), 2u);
  EXPECT_EQ(q.block_hashes(), ref_chain(q.token_ids, bs));
}
