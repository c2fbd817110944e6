// Token spelling -> int32 value for the vocab (150k tokens for Qwen3): open addressing over 8-byte slots, the
// spellings back to back in one string. Built once at load time with no allocation per token; the merges
// look up 450k spellings while loading, token_to_id() looks up one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::tokenizer {

class TokenIndex {
 public:
  TokenIndex();

  // Sets the value of `token`, adding it when new. Keys are numbered 0, 1, ... in the order they first came.
  void insert_or_assign(std::string_view token, int32_t value);
  // The value of `token`, or -1 when absent.
  int32_t find(std::string_view token) const;

  void reserve(size_t keys, size_t text_bytes);
  void clear();  // keeps the memory

  size_t size() const { return keys_.size(); }
  size_t text_size() const { return text_.size(); }
  std::string_view key(size_t i) const { return std::string_view(text_).substr(keys_[i].offset, keys_[i].size); }
  int32_t value(size_t i) const { return keys_[i].value; }
  void set_value(size_t i, int32_t value) { keys_[i].value = value; }

 private:
  struct Key {
    size_t offset;  // into text_
    uint32_t size;
    int32_t value;
  };
  struct Slot {
    uint32_t hash;  // low 32 bits of the key's hash: most mismatches are rejected without reading text_
    uint32_t key;   // 1 + index into keys_; 0 marks a free slot
  };
  // The slot holding `token`, or the free slot where it would go.
  size_t slot_of(std::string_view token, uint32_t hash) const;
  void rehash(size_t slots);

  std::string text_;
  std::vector<Key> keys_;
  std::vector<Slot> slots_;  // [power of two], at most half full
  size_t mask_;
};

}  // namespace nanovllm::tokenizer
