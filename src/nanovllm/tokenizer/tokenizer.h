// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (Qwen2/Qwen3, GPT-2, Llama-3 style),
// giving the same ids as HF `tokenizers`.
//
// Pipeline of encode():
//   1. the input must be valid UTF-8, else nanovllm::Error ("tokenizer: input is not valid UTF-8 at byte N");
//   2. added tokens with normalized=false are cut out of the raw text (added_tokens.h);
//   3. the rest is normalized (NFC for Qwen), then added tokens with normalized=true are cut out;
//   4. pre-tokenizer: Split regexes (PCRE2 JIT) and ByteLevel; 5. BPE per word (cached);
//   6. post-processor when add_special_tokens (ByteLevel adds nothing; TemplateProcessing adds its tokens).
// Supported tokenizer.json parts (anything else is rejected at load with an Error naming it): model BPE
// (no dropout / byte_fallback / subword prefixes), normalizer null | NFC | NFD | NFKC | NFKD | Sequence of
// those, pre_tokenizer Split(Isolated) | ByteLevel(add_prefix_space=false) | Sequence of those ending in
// ByteLevel, decoder ByteLevel, post_processor null | ByteLevel | TemplateProcessing | Sequence of those.
//
// Thread safety: a Tokenizer is immutable after loading except for an internal, mutex-guarded word cache;
// encode/decode may run concurrently. Copies share the loaded tables.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nanovllm/tokenizer/added_tokens.h"

namespace nanovllm::tokenizer {

class Tokenizer {
 public:
  // Reads <dir>/tokenizer.json, plus <dir>/tokenizer_config.json when present (eos/bos/pad token names and
  // any added_tokens_decoder entries missing from tokenizer.json). Every token id must be below
  // `model_vocab_size` (the model's config.json vocab_size; 0: no model, then below 2^24, the largest
  // vocabulary supported): a file with an id outside is an Error naming the file and the field.
  static Tokenizer from_model_dir(const std::filesystem::path& dir, int64_t model_vocab_size = 0);
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // The content of a tokenizer.json; `config_json` optionally that of tokenizer_config.json.
  static Tokenizer from_json_string(std::string_view tokenizer_json, std::string_view config_json = {},
                                    int64_t model_vocab_size = 0);

  // Throws nanovllm::Error when `text` is not valid UTF-8 (message gives the byte offset).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids outside the vocabulary are skipped (as HF does; models pad their embedding past the vocab).
  // Bytes that do not form valid UTF-8 become U+FFFD, like HF (String::from_utf8_lossy).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Largest id + 1, added tokens included (151669 for Qwen3; the model's embedding may be larger).
  int64_t vocab_size() const;
  // Token string as spelled in tokenizer.json (byte-level alphabet, e.g. "Ġhello"), or an added token.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // Raw bytes `id` decodes to (may be part of a UTF-8 character); empty for ids outside the vocabulary.
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;  // an added token with special=true
  const std::vector<AddedToken>& added_tokens() const;

  // From tokenizer_config.json (nullopt when absent or unknown).
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> pad_token_id() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Streaming decode for generated tokens: add() returns only text made of complete UTF-8 characters, holding
// back the bytes of a character split across tokens until it completes. The concatenation of every add()
// result and finish() equals tokenizer.decode(all ids, skip_special_tokens). Invalid byte sequences become
// U+FFFD as soon as they are known to be invalid; finish() turns a dangling partial character into U+FFFD.
// The tokenizer must outlive the detokenizer.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  std::string add(int32_t id);
  std::string add(std::span<const int32_t> ids);
  std::string finish();
  // Bytes held back, waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string drain(bool final);
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace nanovllm::tokenizer

namespace nanovllm {
using tokenizer::IncrementalDetokenizer;
using tokenizer::Tokenizer;
}  // namespace nanovllm
