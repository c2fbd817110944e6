// GrammarCompiler: constraints (vLLM's structured-output kinds) -> CompiledGrammar for one vocabulary,
// with a cache so requests that repeat a schema compile it once. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nanovllm/grammar/compiled_grammar.h"
#include "nanovllm/grammar/grammar.h"
#include "nanovllm/grammar/vocabulary.h"

namespace nanovllm::grammar {

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice, kEbnf };

// The Grammar of one constraint: kJsonSchema `text` is a JSON Schema, kJsonObject any JSON object (text
// unused), kRegex a regular expression, kEbnf EBNF text, kChoice one of `choices` exactly. Throws
// nanovllm::Error naming what is wrong or unsupported.
Grammar constraint_grammar(ConstraintKind kind, std::string_view text, const std::vector<std::string>& choices = {});

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, size_t cache_capacity = 256);

  const TokenVocabulary& vocab() const { return *vocab_; }
  // Cached by (kind, text, choices); the least recently used entry goes when the cache is full.
  std::shared_ptr<const CompiledGrammar> compile(ConstraintKind kind, std::string_view text,
                                                 const std::vector<std::string>& choices = {});
  // Not cached.
  std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar) const;

  size_t cache_size() const;
  int64_t cache_hits() const;

 private:
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  int64_t hits_ = 0;
};

}  // namespace nanovllm::grammar
