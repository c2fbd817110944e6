// Byte-level BPE model: merges ranked by their order in tokenizer.json, applied lowest rank first (leftmost
// on ties), exactly like HF tokenizers' BPE::merge_word. Works on raw bytes (see byte_level.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nanovllm/tokenizer/token_index.h"

namespace nanovllm::tokenizer {

// Open-addressing map (left id, right id) -> (rank, merged id). ~150k merges; lookups dominate encode time.
class MergeTable {
 public:
  struct Entry {
    uint64_t key;  // (left << 32) | right; kEmpty marks a free slot
    int32_t rank;
    int32_t new_id;
  };
  static constexpr uint64_t kEmpty = ~0ull;

  void reserve(size_t n);
  // Returns false when the pair is already present (the first, lowest rank wins).
  bool insert(int32_t left, int32_t right, int32_t rank, int32_t new_id);
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = make_key(left, right);
    size_t i = hash(key) & mask_;
    for (;;) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static uint64_t make_key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static size_t hash(uint64_t k) {
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 32;
    return static_cast<size_t>(k);
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Word -> ids cache: open addressing over 64-bit hashes, keys and ids in two arenas (no per-entry
// allocation). Stops inserting when full (as HF's cache does). Not thread-safe by itself.
class WordCache {
 public:
  explicit WordCache(size_t capacity);
  // Appends the cached ids of `word` to `out`; false when absent.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n);
  static uint64_t hash_of(std::string_view word);

 private:
  struct Slot {
    uint64_t hash;
    uint32_t key_off, ids_off;
    uint16_t key_len, ids_len;  // 0 key_len marks a free slot (empty words are never cached)
  };
  std::vector<Slot> slots_;
  size_t mask_, size_ = 0, max_size_;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// One merge as spelled in tokenizer.json: its left and right tokens back to back in `pair`, which is thus also
// the spelling of the token they merge into.
struct MergeRule {
  std::string_view pair;
  size_t left_size;
  std::string_view left() const { return pair.substr(0, left_size); }
  std::string_view right() const { return pair.substr(left_size); }
};

struct BpeOptions {
  bool ignore_merges = false;  // a word that is itself in the vocab maps straight to its id
};

class BpeModel {
 public:
  // vocab: byte-level token string -> id; merges: best first.
  BpeModel(const TokenIndex& vocab, std::span<const MergeRule> merges, BpeOptions options);

  // Appends the ids of one pre-tokenized word, given as raw bytes.
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  void merge_small(std::vector<int32_t>& syms) const;  // O(n^2) scan: fastest for short words
  void merge_large(std::vector<int32_t>& syms) const;  // heap, O(n log n): long runs (CJK, digits, spaces)

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  int32_t byte_id_[256];
  MergeTable merges_;
  BpeOptions options_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> raw_vocab_;  // only with ignore_merges

  // Per-word cache, shared by all threads that encode with this model.
  static constexpr size_t kCacheCapacity = 1 << 17;
  static constexpr size_t kMaxCachedWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable WordCache cache_{kCacheCapacity};
};

}  // namespace nanovllm::tokenizer
