#include "nanovllm/grammar/compiler.h"

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/automaton.h"
#include "nanovllm/grammar/ebnf.h"
#include "nanovllm/grammar/json_schema.h"
#include "nanovllm/grammar/regex.h"

namespace nanovllm::grammar {

Grammar constraint_grammar(ConstraintKind kind, std::string_view text, const std::vector<std::string>& choices) {
  switch (kind) {
    case ConstraintKind::kJsonSchema: return json_schema_grammar(text);
    case ConstraintKind::kJsonObject: return json_object_grammar();
    case ConstraintKind::kEbnf: return parse_ebnf(text);
    case ConstraintKind::kRegex:
    case ConstraintKind::kChoice: {
      Grammar g;
      const int32_t root = g.add_rule("root");
      if (kind == ConstraintKind::kRegex) {
        g.set_body(root, parse_regex(text));
      } else {
        NANOVLLM_CHECK(!choices.empty(), "choice: the list of choices is empty");
        std::vector<Expr> alts;
        for (const std::string& c : choices) {
          NANOVLLM_CHECK(!c.empty(), "choice: a choice is the empty string");
          alts.push_back(Expr::literal(c));
        }
        g.set_body(root, Expr::alt(std::move(alts)));
      }
      g.set_root(root);
      return g;
    }
  }
  NANOVLLM_FAIL("unknown constraint kind");
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, size_t cache_capacity)
    : vocab_(std::move(vocab)), capacity_(cache_capacity) {
  NANOVLLM_CHECK(vocab_ != nullptr, "GrammarCompiler: no vocabulary");
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const Grammar& grammar) const {
  return std::make_shared<const CompiledGrammar>(compile_grammar(grammar), vocab_);
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(ConstraintKind kind, std::string_view text,
                                                                const std::vector<std::string>& choices) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(kind)));
  key += text;
  for (const std::string& c : choices) {
    key += '\0';
    key += c;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
  }
  // Compiled outside the lock: two threads may both compile a new key; the second insert wins harmlessly.
  std::shared_ptr<const CompiledGrammar> compiled = compile(constraint_grammar(kind, text, choices));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCompiler::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

int64_t GrammarCompiler::cache_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace nanovllm::grammar
