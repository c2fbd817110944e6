#include "nanovllm/engine/block_manager.h"

#include <algorithm>

#include "nanovllm/core/error.h"

namespace nanovllm {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching) {
  NANOVLLM_CHECK(num_blocks >= 1, "BlockManager: num_blocks must be >= 1, got ", num_blocks);
  NANOVLLM_CHECK(num_blocks <= INT32_MAX, "BlockManager: num_blocks too large: ", num_blocks);
  NANOVLLM_CHECK(block_size >= 1, "BlockManager: block_size must be >= 1, got ", block_size);
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < static_cast<int32_t>(num_blocks); ++i) {
    blocks_[i].free_it = free_list_.insert(free_list_.end(), i);
  }
}

const std::vector<uint64_t>& BlockManager::chain(const Sequence& seq, int64_t num_blocks) const {
  NANOVLLM_ASSERT(num_blocks == 0 || (seq.block_hash_size() == block_size_ &&
                                       static_cast<int64_t>(seq.block_hashes().size()) >= num_blocks),
                  "request ", seq.seq_id, ": its block hashes (", seq.block_hashes().size(), " of ",
                  seq.block_hash_size(), " tokens) do not cover ", num_blocks, " blocks of ", block_size_);
  return seq.block_hashes();
}

std::vector<int32_t> BlockManager::match_prefix(const Sequence& seq) const {
  std::vector<int32_t> hits;
  if (!enable_prefix_caching_) return hits;
  // Only blocks lying entirely inside the first num_tokens - 1 tokens: the last token is recomputed.
  const int64_t max_blocks = std::max<int64_t>(seq.num_tokens() - 1, 0) / block_size_;
  const std::vector<uint64_t>& hashes = chain(seq, max_blocks);
  for (int64_t i = 0; i < max_blocks; ++i) {
    const int32_t* toks = seq.tokens().data() + i * block_size_;
    auto it = hash_to_block_.find(hashes[static_cast<size_t>(i)]);
    if (it == hash_to_block_.end()) break;
    const Block& b = blocks_[it->second];
    if (!std::equal(b.tokens.begin(), b.tokens.end(), toks)) break;  // 64-bit hash collision
    hits.push_back(it->second);
  }
  return hits;
}

int64_t BlockManager::num_prefix_hit_tokens(const Sequence& seq) const {
  return static_cast<int64_t>(match_prefix(seq).size()) * block_size_;
}

bool BlockManager::can_allocate(const Sequence& seq) const {
  const std::vector<int32_t> hits = match_prefix(seq);
  int64_t hits_in_use = 0;  // hits that are already referenced take no block from the free list
  for (int32_t id : hits) hits_in_use += blocks_[id].ref > 0;
  return blocks_for(seq.num_tokens()) - hits_in_use <= num_free_blocks();
}

int32_t BlockManager::take_fresh_block() {
  NANOVLLM_ASSERT(!free_list_.empty(), "BlockManager: out of blocks");
  const int32_t id = free_list_.front();
  free_list_.pop_front();
  Block& b = blocks_[id];
  if (b.has_hash) {  // lazy eviction happens now
    auto it = hash_to_block_.find(b.hash);
    if (it != hash_to_block_.end() && it->second == id) hash_to_block_.erase(it);
    b.has_hash = false;
    b.tokens.clear();
  }
  b.ref = 1;
  return id;
}

void BlockManager::allocate(Sequence& seq) {
  NANOVLLM_ASSERT(seq.block_table.empty(), "allocate() on a sequence that holds blocks");
  NANOVLLM_ASSERT(can_allocate(seq), "allocate() without can_allocate()");
  const std::vector<int32_t> hits = match_prefix(seq);
  // Revive the hits first so that fresh allocations below can never evict them.
  for (int32_t id : hits) {
    Block& b = blocks_[id];
    if (b.ref++ == 0) free_list_.erase(b.free_it);
    seq.block_table.push_back(id);
  }
  const int64_t total = blocks_for(seq.num_tokens());
  while (static_cast<int64_t>(seq.block_table.size()) < total) seq.block_table.push_back(take_fresh_block());
  seq.num_cached_tokens = static_cast<int64_t>(hits.size()) * block_size_;
  seq.num_computed_tokens = seq.num_cached_tokens;
  stats_.queried_tokens += seq.num_tokens();
  stats_.hit_tokens += seq.num_cached_tokens;
}

bool BlockManager::can_append(const Sequence& seq, int64_t num_new_tokens) const {
  const int64_t need = blocks_for(seq.num_computed_tokens + num_new_tokens) -
                       static_cast<int64_t>(seq.block_table.size());
  return need <= num_free_blocks();
}

void BlockManager::append_slots(Sequence& seq, int64_t num_new_tokens) {
  NANOVLLM_ASSERT(can_append(seq, num_new_tokens), "append_slots() without can_append()");
  const int64_t total = blocks_for(seq.num_computed_tokens + num_new_tokens);
  while (static_cast<int64_t>(seq.block_table.size()) < total) seq.block_table.push_back(take_fresh_block());
}

void BlockManager::commit_full_blocks(Sequence& seq) {
  if (!enable_prefix_caching_) return;
  const int64_t num_full = std::min(seq.num_computed_tokens, seq.num_tokens()) / block_size_;
  NANOVLLM_ASSERT(num_full <= static_cast<int64_t>(seq.block_table.size()));
  const std::vector<uint64_t>& hashes = chain(seq, num_full);
  // Blocks are committed in order, so the committed ones form a prefix: find where it ends.
  int64_t first = num_full;
  while (first > 0 && !blocks_[seq.block_table[first - 1]].has_hash) --first;
  for (int64_t i = first; i < num_full; ++i) {
    const int32_t id = seq.block_table[i];
    Block& b = blocks_[id];
    const int32_t* toks = seq.tokens().data() + i * block_size_;
    b.hash = hashes[static_cast<size_t>(i)];
    b.has_hash = true;  // even when not registered: marks it committed (the search for `first` above)
    b.tokens.assign(toks, toks + block_size_);
    hash_to_block_.try_emplace(b.hash, id);  // an existing identical block keeps the entry
  }
}

void BlockManager::release(int32_t id) {
  Block& b = blocks_[id];
  NANOVLLM_ASSERT(b.ref > 0, "double free of block ", id);
  if (--b.ref > 0) return;
  auto it = b.has_hash ? hash_to_block_.find(b.hash) : hash_to_block_.end();
  if (it != hash_to_block_.end() && it->second == id) {
    b.free_it = free_list_.insert(free_list_.end(), id);  // cached: LRU tail, reusable until evicted
  } else {
    b.has_hash = false;
    b.tokens.clear();
    b.free_it = free_list_.insert(free_list_.begin(), id);  // worthless: reuse first
  }
}

void BlockManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) release(*it);
  seq.block_table.clear();
}

}  // namespace nanovllm
