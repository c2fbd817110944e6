#include "nanovllm/grammar/ebnf.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/utf8.h"

namespace nanovllm::grammar {
namespace {

constexpr int32_t kMaxRepeat = 100000;

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : text_(text) {}

  Grammar parse() {
    // Pass 1: rule names, so rules may be used before they are defined.
    std::vector<std::pair<std::string, size_t>> heads;  // name, position of its body
    skip_space();
    while (pos_ < text_.size()) {
      const size_t start = pos_;
      rule_starts_.push_back(start);
      std::string name = read_name();
      if (name.empty() || !skip_defines()) {
        pos_ = start;
        fail("expected a rule `name ::= ...`");
      }
      NANOVLLM_CHECK(grammar_.find(name) < 0, where(start), "rule '", name, "' is defined twice");
      grammar_.add_rule(name);
      heads.emplace_back(name, pos_);
      skip_to_next_rule();
    }
    NANOVLLM_CHECK(!heads.empty(), "grammar: no rules (expected `root ::= ...`)");
    // Pass 2: bodies.
    for (size_t i = 0; i < heads.size(); ++i) {
      pos_ = heads[i].second;
      end_ = i + 1 < heads.size() ? rule_starts_[i + 1] : text_.size();
      Expr body = parse_alternatives();
      skip_space();
      if (pos_ < end_) fail("unexpected character");
      grammar_.set_body(static_cast<int32_t>(i), std::move(body));
    }
    const int32_t root = grammar_.find("root");
    grammar_.set_root(root >= 0 ? root : 0);
    return std::move(grammar_);
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  size_t end_ = 0;                  // end of the rule body being parsed
  std::vector<size_t> rule_starts_;  // where each rule's name begins
  Grammar grammar_;

  std::string where(size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "grammar line " + std::to_string(line) + " col " + std::to_string(col) + ": ";
  }
  [[noreturn]] void fail(const std::string& what) const { NANOVLLM_FAIL(where(pos_), what); }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }
  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  // After a name: `::=` (whitespace before it allowed on the same logical position).
  bool skip_defines() {
    skip_space();
    if (text_.substr(pos_, 3) != "::=") return false;
    pos_ += 3;
    return true;
  }
  // Moves pos_ to the start of the next `name ::=` (skipping literals, classes and comments), recording it.
  void skip_to_next_rule() {
    while (pos_ < text_.size()) {
      skip_space();
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == '"' || c == '\'') {
        const char quote = c;
        for (++pos_; pos_ < text_.size() && text_[pos_] != quote; ++pos_)
          if (text_[pos_] == '\\') ++pos_;
        if (pos_ >= text_.size()) fail("unterminated literal");
        ++pos_;
      } else if (c == '[') {
        for (++pos_; pos_ < text_.size() && text_[pos_] != ']'; ++pos_)
          if (text_[pos_] == '\\') ++pos_;
        if (pos_ >= text_.size()) fail("unterminated character class");
        ++pos_;
      } else if (name_char(c)) {
        const size_t start = pos_;
        read_name();
        const size_t after = pos_;
        if (skip_defines()) {
          pos_ = start;
          return;
        }
        pos_ = after;
      } else {
        ++pos_;
      }
    }
  }

  bool at_end() {
    skip_space();
    return pos_ >= end_;
  }

  Expr parse_alternatives() {
    std::vector<Expr> choices;
    choices.push_back(parse_sequence());
    while (!at_end() && text_[pos_] == '|') {
      ++pos_;
      choices.push_back(parse_sequence());
    }
    return Expr::alt(std::move(choices));
  }

  Expr parse_sequence() {
    std::vector<Expr> items;
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == '|' || c == ')') break;
      items.push_back(parse_postfix(parse_atom()));
    }
    return Expr::seq(std::move(items));
  }

  Expr parse_atom() {
    const char c = text_[pos_];
    if (c == '"' || c == '\'') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Expr::cls({{0, kMaxCodepoint}});
    }
    if (c == '(') {
      ++pos_;
      Expr inner = parse_alternatives();
      if (at_end() || text_[pos_] != ')') fail("expected ')'");
      ++pos_;
      return inner;
    }
    if (name_char(c)) {
      const size_t start = pos_;
      const std::string name = read_name();
      const int32_t id = grammar_.find(name);
      if (id < 0) {
        pos_ = start;
        fail("undefined rule '" + name + "'");
      }
      return Expr::ref(id);
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  int64_t read_number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < end_ && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_] - '0');
      if (v > kMaxRepeat) fail("repetition count larger than " + std::to_string(kMaxRepeat));
      ++pos_;
    }
    if (pos_ == start) fail("expected a number");
    return v;
  }

  Expr parse_postfix(Expr e) {
    while (pos_ < end_) {  // no whitespace between an atom and its operator
      const char c = text_[pos_];
      if (c == '*') {
        ++pos_;
        e = Expr::star(std::move(e));
      } else if (c == '+') {
        ++pos_;
        e = Expr::plus(std::move(e));
      } else if (c == '?') {
        ++pos_;
        e = Expr::optional(std::move(e));
      } else if (c == '{') {
        ++pos_;
        const int64_t min = read_number();
        int64_t max = min;
        if (pos_ < end_ && text_[pos_] == ',') {
          ++pos_;
          max = pos_ < end_ && text_[pos_] == '}' ? -1 : read_number();
        }
        if (pos_ >= end_ || text_[pos_] != '}') fail("expected '}'");
        ++pos_;
        if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
        e = Expr::repeat(std::move(e), static_cast<int32_t>(min), static_cast<int32_t>(max));
      } else {
        break;
      }
    }
    return e;
  }

  // An escape after '\': appends the byte (\xNN in a literal) or code point to `out` / returns it.
  // in_class: \xNN is a code point; otherwise a raw byte, returned as -(byte + 1).
  int64_t parse_escape(bool in_class) {
    if (pos_ >= end_) fail("dangling '\\'");
    const char c = text_[pos_++];
    auto hex = [&](int digits) {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (pos_ >= end_) fail("short \\x/\\u escape");
        const int d = hex_digit(text_[pos_++]);
        if (d < 0) fail("bad hex digit in escape");
        v = v << 4 | static_cast<uint32_t>(d);
      }
      return v;
    };
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': {
        const uint32_t v = hex(2);
        return in_class ? static_cast<int64_t>(v) : -static_cast<int64_t>(v) - 1;
      }
      case 'u':
      case 'U': {
        const uint32_t v = hex(c == 'u' ? 4 : 8);
        if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) fail("escape is not a Unicode scalar value");
        return v;
      }
      default: return static_cast<unsigned char>(c);  // \\ \" \' \[ \] \- \^ ...
    }
  }

  Expr parse_literal() {
    const char quote = text_[pos_++];
    std::string bytes;
    while (true) {
      if (pos_ >= end_) fail("unterminated literal");
      const char c = text_[pos_];
      if (c == quote) break;
      if (c == '\\') {
        ++pos_;
        const int64_t v = parse_escape(false);
        if (v < 0) {
          bytes += static_cast<char>(-v - 1);
        } else {
          append_utf8(static_cast<uint32_t>(v), bytes);
        }
      } else {
        bytes += c;
        ++pos_;
      }
    }
    ++pos_;
    return Expr::literal(bytes);
  }

  uint32_t class_codepoint() {
    if (text_[pos_] == '\\') {
      ++pos_;
      return static_cast<uint32_t>(parse_escape(true));
    }
    size_t p = pos_;
    const int64_t cp = decode_utf8(text_.substr(0, end_), p);
    if (cp < 0) fail("invalid UTF-8 in a character class");
    pos_ = p;
    return static_cast<uint32_t>(cp);
  }

  Expr parse_class() {
    ++pos_;  // '['
    bool negated = false;
    if (pos_ < end_ && text_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    CodepointRanges ranges;
    while (true) {
      if (pos_ >= end_) fail("unterminated character class");
      if (text_[pos_] == ']') break;
      const uint32_t lo = class_codepoint();
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = class_codepoint();
        if (hi < lo) fail("character class range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    ranges = normalize_ranges(std::move(ranges));
    if (negated) ranges = complement_ranges(ranges);
    if (ranges.empty()) fail("character class matches nothing");
    return Expr::cls(std::move(ranges));
  }
};

}  // namespace

Grammar parse_ebnf(std::string_view text) { return EbnfParser(text).parse(); }

}  // namespace nanovllm::grammar
