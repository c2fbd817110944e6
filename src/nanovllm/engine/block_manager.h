// BlockManager: paged KV block accounting with automatic prefix caching (vLLM v1 semantics).
//
// Prefix cache: every FULL block of a sequence whose K/V has been written is cached under its chained
// hash (block_hash.h), which names the block's tokens AND everything before them. The hashes are the
// sequence's own (Sequence::block_hashes, computed once per block, for this block size); the block
// manager never hashes. Partial blocks are never cached.
// Blocks are ref-counted; a cached block whose ref count drops to 0 keeps its hash (lazy eviction) and
// goes to the tail of an LRU free list: a later prefix hit revives it (ref 0 -> 1), and only when a
// fresh block is needed is the least recently freed one evicted (its hash entry is dropped then).
// Freed blocks that carry no hash go to the head of the free list: they hold nothing worth keeping.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "nanovllm/engine/sequence.h"

namespace nanovllm {

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // tokens looked up at admission (sum of num_tokens over allocate calls)
  int64_t hit_tokens = 0;      // of those, served from the cache (sum of num_cached_tokens)
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching = true);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return enable_prefix_caching_; }
  // Blocks with ref count 0 (includes cached-but-free blocks, which are reclaimable).
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  // Blocks currently registered in the hash map (used or free).
  int64_t num_cached_blocks() const { return static_cast<int64_t>(hash_to_block_.size()); }
  const PrefixCacheStats& stats() const { return stats_; }
  int32_t ref_count(int32_t block_id) const { return blocks_.at(block_id).ref; }

  // Blocks needed to hold n tokens.
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Tokens of seq.token_ids that a prefix-cache lookup would serve right now (a multiple of block_size).
  // At most the full blocks inside the first num_tokens - 1 tokens: the last token is always computed
  // so that its logits exist; when a prompt is a whole number of blocks its last block is recomputed
  // into a fresh block (never written into a shared one).
  int64_t num_prefix_hit_tokens(const Sequence& seq) const;

  // Admission of a sequence with no blocks: reuses cached blocks for its prefix, allocates fresh blocks
  // for all the rest of seq.token_ids (the whole prompt, or prompt + outputs after a preemption).
  // Sets seq.block_table, seq.num_cached_tokens and seq.num_computed_tokens (= num_cached_tokens).
  bool can_allocate(const Sequence& seq) const;
  void allocate(Sequence& seq);  // precondition: can_allocate(seq)

  // Grows seq.block_table to hold num_computed_tokens + num_new_tokens tokens.
  bool can_append(const Sequence& seq, int64_t num_new_tokens) const;
  void append_slots(Sequence& seq, int64_t num_new_tokens);  // precondition: can_append

  // After the K/V of seq's first num_computed_tokens tokens has been written: registers the hashes of
  // blocks that have become full. If an identical block is already cached (two sequences computed the
  // same prefix at once), the existing entry wins and this block stays uncached.
  void commit_full_blocks(Sequence& seq);

  // Releases seq's blocks in reverse order (so the LRU evicts a sequence's tail blocks first) and
  // clears seq.block_table. Does not touch seq.num_computed_tokens.
  void free(Sequence& seq);

 private:
  struct Block {
    int32_t ref = 0;
    bool has_hash = false;  // a full, committed block; registered iff hash_to_block_[hash] == this id
    uint64_t hash = 0;
    std::vector<int32_t> tokens;               // [block_size] when has_hash: guards against collisions
    std::list<int32_t>::iterator free_it{};    // valid iff ref == 0
  };

  // Cached blocks matching seq's prefix, in order (see num_prefix_hit_tokens).
  std::vector<int32_t> match_prefix(const Sequence& seq) const;
  // seq.block_hashes(), checked to be of this block size and to cover its first num_blocks blocks.
  const std::vector<uint64_t>& chain(const Sequence& seq, int64_t num_blocks) const;
  int32_t take_fresh_block();  // pops the LRU head, evicting its hash entry
  void release(int32_t id);

  int64_t block_size_;
  bool enable_prefix_caching_;
  std::vector<Block> blocks_;
  std::list<int32_t> free_list_;  // ref == 0; head = next to be reused
  std::unordered_map<uint64_t, int32_t> hash_to_block_;
  PrefixCacheStats stats_;
};

}  // namespace nanovllm
