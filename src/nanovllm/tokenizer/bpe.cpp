#include "nanovllm/tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/byte_level.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace nanovllm::tokenizer {

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  size_ = 0;
}

bool MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t new_id) {
  const uint64_t key = make_key(left, right);
  size_t i = hash(key) & mask_;
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == key) return false;
    i = (i + 1) & mask_;
  }
  slots_[i] = Entry{key, rank, new_id};
  ++size_;
  return true;
}

WordCache::WordCache(size_t capacity) : max_size_(capacity) {
  size_t cap = 16;
  while (cap < capacity * 2) cap <<= 1;
  slots_.assign(cap, Slot{0, 0, 0, 0, 0});
  mask_ = cap - 1;
}

uint64_t WordCache::hash_of(std::string_view word) { return XXH3_64bits(word.data(), word.size()); }

bool WordCache::lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key_len == 0) return false;
    if (s.hash == hash && s.key_len == word.size() &&
        std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n) {
  if (size_ >= max_size_ || word.empty() || word.size() > 0xFFFF || n > 0xFFFF) return;
  if (keys_.size() + word.size() > UINT32_MAX || ids_.size() + n > UINT32_MAX) return;
  size_t i = hash & mask_;
  for (;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key_len == 0) break;
    if (s.hash == hash && s.key_len == word.size() &&
        std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
      return;  // another thread got here first
    }
  }
  slots_[i] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(ids_.size()),
                   static_cast<uint16_t>(word.size()), static_cast<uint16_t>(n)};
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + n);
  ++size_;
}

BpeModel::BpeModel(const TokenIndex& vocab, std::span<const MergeRule> merges, BpeOptions options)
    : options_(options) {
  const auto& b2u = byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    // single byte-level character
    if (b2u[b] < 0x80) s.push_back(static_cast<char>(b2u[b]));
    else if (b2u[b] < 0x800) { s.push_back(static_cast<char>(0xC0 | (b2u[b] >> 6))); s.push_back(static_cast<char>(0x80 | (b2u[b] & 0x3F))); }
    const int32_t id = vocab.find(s);
    NANOVLLM_CHECK(id >= 0, "tokenizer.json: byte-level BPE vocab has no token for byte 0x", std::hex, b,
                   " (expected token '", s, "'); only byte-level BPE without unk tokens is supported");
    byte_id_[b] = id;
  }

  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& m = merges[rank];
    const int32_t left = vocab.find(m.left()), right = vocab.find(m.right());
    NANOVLLM_CHECK(left >= 0 && right >= 0, "tokenizer.json: merge #", rank, " '", m.left(), " ", m.right(),
                   "' uses a token missing from the vocab");
    const int32_t merged = vocab.find(m.pair);
    NANOVLLM_CHECK(merged >= 0, "tokenizer.json: merge #", rank, " '", m.left(), " ", m.right(),
                   "' produces a token missing from the vocab");
    merges_.insert(left, right, static_cast<int32_t>(rank), merged);
  }

  if (options_.ignore_merges) {
    // Two tokens decode to the same bytes only when one is not in the byte-level alphabet (it is then its own
    // bytes); the one that sorts first wins, as when the vocab was read in key order. Values: key numbers.
    for (size_t k = 0; k < vocab.size(); ++k) {
      const auto [it, added] = raw_vocab_.try_emplace(byte_level_token_bytes(vocab.key(k)), static_cast<int32_t>(k));
      if (!added && vocab.key(k) < vocab.key(static_cast<size_t>(it->second))) it->second = static_cast<int32_t>(k);
    }
    for (auto& [bytes, k] : raw_vocab_) k = vocab.value(static_cast<size_t>(k));
  }
}

void BpeModel::merge_small(std::vector<int32_t>& syms) const {
  size_t n = syms.size();
  while (n > 1) {
    int32_t best_rank = INT32_MAX, best_id = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < n; ++i) {
      const MergeTable::Entry* e = merges_.find(syms[i], syms[i + 1]);
      if (e != nullptr && e->rank < best_rank) {
        best_rank = e->rank;
        best_id = e->new_id;
        best = i;
      }
    }
    if (best_id < 0) break;
    syms[best] = best_id;
    std::copy(syms.begin() + static_cast<ptrdiff_t>(best) + 2, syms.begin() + static_cast<ptrdiff_t>(n),
              syms.begin() + static_cast<ptrdiff_t>(best) + 1);
    --n;
  }
  syms.resize(n);
}

void BpeModel::merge_large(std::vector<int32_t>& syms) const {
  const int n = static_cast<int>(syms.size());
  std::vector<int> prev(n), next(n);  // [n] doubly linked list over live symbols
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) { prev[i] = i - 1; next[i] = i + 1 < n ? i + 1 : -1; }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const auto* e = merges_.find(syms[pos], syms[next[pos]])) heap.push({e->rank, pos, e->new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int r = next[c.pos];
    const auto* e = merges_.find(syms[c.pos], syms[r]);
    if (e == nullptr || e->new_id != c.new_id || e->rank != c.rank) continue;  // stale entry
    syms[c.pos] = c.new_id;
    alive[r] = false;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  int w = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) syms[w++] = syms[i];
  syms.resize(static_cast<size_t>(w));
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) { out.push_back(byte_id_[static_cast<unsigned char>(bytes[0])]); return; }
  const bool cacheable = bytes.size() <= kMaxCachedWordBytes;
  uint64_t hash = 0;
  if (cacheable) {
    hash = WordCache::hash_of(bytes);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.lookup(bytes, hash, out)) return;
  }
  if (options_.ignore_merges) {
    auto it = raw_vocab_.find(bytes);
    if (it != raw_vocab_.end()) { out.push_back(it->second); return; }
  }
  std::vector<int32_t> syms(bytes.size());  // [len] one symbol per byte to start with
  for (size_t i = 0; i < bytes.size(); ++i) syms[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
  if (syms.size() <= 48) merge_small(syms);
  else merge_large(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    cache_.insert(bytes, hash, syms.data(), syms.size());
  }
}

}  // namespace nanovllm::tokenizer
