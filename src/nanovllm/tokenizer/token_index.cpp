#include "nanovllm/tokenizer/token_index.h"

#include <algorithm>
#include <cstring>

#include "nanovllm/core/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace nanovllm::tokenizer {
namespace {

uint32_t hash_of(std::string_view token) { return static_cast<uint32_t>(XXH3_64bits(token.data(), token.size())); }

}  // namespace

TokenIndex::TokenIndex() : slots_(16, Slot{0, 0}), mask_(15) {}

size_t TokenIndex::slot_of(std::string_view token, uint32_t hash) const {
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key == 0) return i;
    if (s.hash != hash) continue;
    const Key& k = keys_[s.key - 1];
    if (k.size == token.size() && std::memcmp(text_.data() + k.offset, token.data(), token.size()) == 0) return i;
  }
}

void TokenIndex::rehash(size_t slots) {
  std::vector<Slot> old(slots, Slot{0, 0});
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == 0) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void TokenIndex::reserve(size_t keys, size_t text_bytes) {
  keys_.reserve(keys);
  text_.reserve(text_bytes);
  size_t slots = slots_.size();
  while (slots < 2 * keys) slots *= 2;
  if (slots > slots_.size()) rehash(slots);
}

void TokenIndex::clear() {
  text_.clear();
  keys_.clear();
  std::fill(slots_.begin(), slots_.end(), Slot{0, 0});
}

void TokenIndex::insert_or_assign(std::string_view token, int32_t value) {
  NANOVLLM_CHECK(token.size() <= UINT32_MAX && keys_.size() < UINT32_MAX, "tokenizer: the vocab is too large");
  const uint32_t hash = hash_of(token);
  size_t i = slot_of(token, hash);
  if (slots_[i].key != 0) {
    keys_[slots_[i].key - 1].value = value;
    return;
  }
  if ((keys_.size() + 1) * 2 > slots_.size()) {
    rehash(2 * slots_.size());
    i = slot_of(token, hash);
  }
  keys_.push_back(Key{text_.size(), static_cast<uint32_t>(token.size()), value});
  text_.append(token);
  slots_[i] = Slot{hash, static_cast<uint32_t>(keys_.size())};
}

int32_t TokenIndex::find(std::string_view token) const {
  const Slot& s = slots_[slot_of(token, hash_of(token))];
  return s.key == 0 ? -1 : keys_[s.key - 1].value;
}

}  // namespace nanovllm::tokenizer
