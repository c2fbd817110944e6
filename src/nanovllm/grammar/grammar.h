// Grammar: a context-free grammar over Unicode text, the common form every constraint compiles to
// (EBNF text, a regular expression, a JSON Schema, a list of choices). Rules have names; a rule's body is
// an expression tree of literals, code point classes, rule references, sequences, alternatives and bounded
// or unbounded repetitions. Text is UTF-8: a class of code points matches the UTF-8 bytes of one of them.
//
// to_ebnf() prints the grammar in the EBNF dialect that parse_ebnf() (ebnf.h) reads, so a grammar built
// in code can travel as text (a request's `grammar` field) and come back unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nanovllm::grammar {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Closed code point ranges, sorted, disjoint and non-adjacent, never containing a UTF-16 surrogate
// (U+D800..U+DFFF has no UTF-8 form).
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;
// Sorts, merges and removes surrogates.
CodepointRanges normalize_ranges(CodepointRanges ranges);
// Every code point not in `ranges` (which must be normalized).
CodepointRanges complement_ranges(const CodepointRanges& ranges);

struct Expr {
  enum class Kind : uint8_t { kEmpty, kBytes, kClass, kRule, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  std::string bytes;          // kBytes: the literal (UTF-8, any bytes)
  CodepointRanges ranges;     // kClass: one code point from these (normalized, non-empty)
  int32_t rule = -1;          // kRule: the rule's id
  std::vector<Expr> items;    // kSeq / kAlt: the parts in order; kRepeat: exactly one
  int32_t min = 0, max = -1;  // kRepeat: between min and max copies; max -1 = unbounded

  static Expr empty() { return {}; }
  static Expr literal(std::string_view s);
  static Expr cls(CodepointRanges ranges);  // normalizes; an empty class is an Error
  static Expr codepoint(uint32_t c) { return cls({{c, c}}); }
  static Expr ref(int32_t rule_id);
  static Expr seq(std::vector<Expr> items);  // flattens nested sequences, drops empties
  static Expr alt(std::vector<Expr> items);  // flattens nested alternatives; one item: that item
  static Expr repeat(Expr e, int32_t min, int32_t max);
  static Expr optional(Expr e) { return repeat(std::move(e), 0, 1); }
  static Expr star(Expr e) { return repeat(std::move(e), 0, -1); }
  static Expr plus(Expr e) { return repeat(std::move(e), 1, -1); }
};

struct Rule {
  std::string name;  // [A-Za-z0-9_-]+, unique in its grammar
  Expr body;
};

class Grammar {
 public:
  // A new rule with an empty body; `name` must be a valid, unused rule name.
  int32_t add_rule(const std::string& name);
  // A new rule named after `hint` (invalid characters become '_', a number is appended when taken).
  int32_t add_rule_unique(std::string_view hint);
  void set_body(int32_t rule, Expr body);
  // The id of rule `name`, or -1.
  int32_t find(std::string_view name) const;
  const std::vector<Rule>& rules() const { return rules_; }
  const Rule& rule(int32_t id) const { return rules_.at(static_cast<size_t>(id)); }
  int32_t root() const { return root_; }
  void set_root(int32_t rule) { root_ = rule; }
  // Copies `other`'s rules into this grammar (renamed where names collide) and returns the id its root
  // now has: how constraints are composed (a tool call's JSON inside its tags).
  int32_t import(const Grammar& other);

  // EBNF text: `name ::= body` per rule, the root rule first and named "root" when it is.
  std::string to_ebnf() const;

 private:
  std::vector<Rule> rules_;
  int32_t root_ = -1;
};

bool is_rule_name(std::string_view name);
// A quoted EBNF literal for `bytes` ("..." with \" \\ \n \t \r and \xNN for other control bytes).
std::string quote_literal(std::string_view bytes);

}  // namespace nanovllm::grammar
