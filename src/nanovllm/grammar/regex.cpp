#include "nanovllm/grammar/regex.h"

#include <cstdio>
#include <string>

#include "nanovllm/core/error.h"
#include "nanovllm/grammar/utf8.h"

namespace nanovllm::grammar {
namespace {

constexpr int32_t kMaxRegexRepeat = 10000;

const CodepointRanges& digit_ranges() {
  static const CodepointRanges r = {{'0', '9'}};
  return r;
}
const CodepointRanges& word_ranges() {
  static const CodepointRanges r = normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
  return r;
}
const CodepointRanges& ascii_space_ranges() {
  static const CodepointRanges r = normalize_ranges({{'\t', '\r'}, {' ', ' '}});
  return r;
}
// Everything some regex engine calls whitespace (ECMAScript's \s, which contains Python's): \S excludes it.
const CodepointRanges& unicode_space_ranges() {
  static const CodepointRanges r = normalize_ranges({{'\t', '\r'},
                                                      {' ', ' '},
                                                      {0x85, 0x85},
                                                      {0xA0, 0xA0},
                                                      {0x1680, 0x1680},
                                                      {0x2000, 0x200A},
                                                      {0x2028, 0x2029},
                                                      {0x202F, 0x202F},
                                                      {0x205F, 0x205F},
                                                      {0x3000, 0x3000},
                                                      {0xFEFF, 0xFEFF}});
  return r;
}
const CodepointRanges& dot_ranges() {
  static const CodepointRanges r =
      complement_ranges(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
  return r;
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : p_(p) {}

  Expr parse() {
    size_t end = p_.size();
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    // A trailing unescaped $ (an even number of backslashes before it) anchors the end.
    if (end > pos_ && p_[end - 1] == '$') {
      size_t backslashes = 0;
      for (size_t i = end - 1; i > pos_ && p_[i - 1] == '\\'; --i) ++backslashes;
      if (backslashes % 2 == 0) --end;
    }
    end_ = end;
    Expr e = parse_alternatives();
    if (pos_ < end_) fail(p_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return e;
  }

 private:
  std::string_view p_;
  size_t pos_ = 0, end_ = 0;
  int depth_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    NANOVLLM_FAIL("regex '", p_, "' at offset ", pos_, ": ", what);
  }
  bool more() const { return pos_ < end_; }
  char peek() const { return p_[pos_]; }

  Expr parse_alternatives() {
    std::vector<Expr> choices;
    choices.push_back(parse_sequence());
    while (more() && peek() == '|') {
      ++pos_;
      choices.push_back(parse_sequence());
    }
    return Expr::alt(std::move(choices));
  }

  Expr parse_sequence() {
    std::vector<Expr> items;
    while (more() && peek() != '|' && peek() != ')') items.push_back(parse_quantified(parse_atom()));
    return Expr::seq(std::move(items));
  }

  int32_t read_int() {
    const size_t start = pos_;
    int64_t v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRegexRepeat) fail("repetition count above " + std::to_string(kMaxRegexRepeat));
      ++pos_;
    }
    if (pos_ == start) fail("expected a number in {m,n}");
    return static_cast<int32_t>(v);
  }

  Expr parse_quantified(Expr e) {
    while (more()) {
      int32_t min = 0, max = -1;
      const char c = peek();
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{' && pos_ + 1 < end_ && p_[pos_ + 1] >= '0' && p_[pos_ + 1] <= '9') {
        ++pos_;
        min = max = read_int();
        if (more() && peek() == ',') {
          ++pos_;
          max = more() && peek() == '}' ? -1 : read_int();
        }
        if (!more() || peek() != '}') fail("expected '}'");
        ++pos_;
        if (max >= 0 && max < min) fail("{m,n} with n < m");
      } else {
        break;
      }
      if (more() && peek() == '?') ++pos_;  // lazy: the same strings
      if (more() && peek() == '+') fail("possessive quantifiers are not supported");
      e = Expr::repeat(std::move(e), min, max);
    }
    return e;
  }

  Expr parse_atom() {
    const char c = peek();
    switch (c) {
      case '(': return parse_group();
      case '[': return parse_class();
      case '.': ++pos_; return Expr::cls(dot_ranges());
      case '^': fail("'^' inside the pattern (only a leading ^ is supported)");
      case '$': fail("'$' inside the pattern (only a trailing $ is supported)");
      case '*': case '+': case '?': fail("a quantifier with nothing to repeat");
      case '\\': {
        ++pos_;
        CodepointRanges cls;
        const int64_t cp = parse_escape(false, cls);
        if (cp < 0) return Expr::cls(std::move(cls));
        return Expr::codepoint(static_cast<uint32_t>(cp));
      }
      default: {
        size_t p = pos_;
        const int64_t cp = decode_utf8(p_.substr(0, end_), p);
        if (cp < 0) fail("invalid UTF-8");
        pos_ = p;
        return Expr::codepoint(static_cast<uint32_t>(cp));
      }
    }
  }

  Expr parse_group() {
    ++pos_;  // '('
    if (more() && peek() == '?') {
      ++pos_;
      if (more() && peek() == ':') {
        ++pos_;
      } else if (more() && (peek() == '<' || peek() == 'P')) {
        if (peek() == 'P') ++pos_;
        if (!more() || peek() != '<') fail("unsupported group syntax");
        if (pos_ + 1 < end_ && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!')) fail("lookbehind is not supported");
        while (more() && peek() != '>') ++pos_;
        if (!more()) fail("unterminated group name");
        ++pos_;
      } else if (more() && (peek() == '=' || peek() == '!')) {
        fail("lookahead is not supported");
      } else {
        fail("inline flags and other (?...) groups are not supported");
      }
    }
    if (++depth_ > 200) fail("groups nested deeper than 200");
    Expr inner = parse_alternatives();
    --depth_;
    if (!more() || peek() != ')') fail("missing ')'");
    ++pos_;
    return inner;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (!more()) fail("short hex escape");
      const int d = hex_digit(p_[pos_++]);
      if (d < 0) fail("bad hex digit");
      v = v << 4 | static_cast<uint32_t>(d);
    }
    return v;
  }

  // After '\': a code point (>= 0), or -1 with `cls` set for a class escape (\d \w \s and negations).
  int64_t parse_escape(bool in_class, CodepointRanges& cls) {
    if (!more()) fail("dangling '\\'");
    const char c = p_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'd': cls = digit_ranges(); return -1;
      case 'D': cls = complement_ranges(digit_ranges()); return -1;
      case 'w': cls = word_ranges(); return -1;
      case 'W': cls = complement_ranges(word_ranges()); return -1;
      case 's': cls = ascii_space_ranges(); return -1;
      case 'S': cls = complement_ranges(unicode_space_ranges()); return -1;
      case 'x': return hex(2);
      case 'u': {
        uint32_t v = 0;
        if (more() && peek() == '{') {
          ++pos_;
          int digits = 0;
          while (more() && peek() != '}') {
            v = (v << 4) | hex(1);
            if (++digits > 6) fail("\\u{...} too long");
          }
          if (!more()) fail("unterminated \\u{...}");
          ++pos_;
        } else {
          v = hex(4);
        }
        if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) fail("escape is not a Unicode scalar value");
        return v;
      }
      case 'b':
        if (in_class) return '\b';
        fail("word boundaries (\\b) are not supported");
      case 'B': fail("word boundaries (\\B) are not supported");
      case 'A': case 'Z': case 'z': case 'G': fail(std::string("anchor \\") + c + " is not supported");
      case 'p': case 'P': fail("Unicode property classes (\\p, \\P) are not supported");
      case 'c': fail("control escapes (\\c) are not supported");
      case 'k': fail("named backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail(std::string("unknown escape \\") + c);
        return static_cast<unsigned char>(c);  // escaped punctuation
    }
  }

  Expr parse_class() {
    ++pos_;  // '['
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    CodepointRanges ranges;
    bool first = true;
    while (true) {
      if (!more()) fail("unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      CodepointRanges cls;
      int64_t lo = read_class_atom(cls);
      if (lo < 0) {
        ranges.insert(ranges.end(), cls.begin(), cls.end());
        continue;
      }
      if (pos_ + 1 < end_ && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        CodepointRanges cls2;
        const int64_t hi = read_class_atom(cls2);
        if (hi < 0) fail("a class escape cannot end a range");
        if (hi < lo) fail("character class range out of order");
        ranges.emplace_back(static_cast<uint32_t>(lo), static_cast<uint32_t>(hi));
      } else {
        ranges.emplace_back(static_cast<uint32_t>(lo), static_cast<uint32_t>(lo));
      }
    }
    ++pos_;  // ']'
    ranges = normalize_ranges(std::move(ranges));
    if (negated) ranges = complement_ranges(ranges);
    if (ranges.empty()) fail("character class matches nothing");
    return Expr::cls(std::move(ranges));
  }

  int64_t read_class_atom(CodepointRanges& cls) {
    if (peek() == '\\') {
      ++pos_;
      return parse_escape(true, cls);
    }
    if (peek() == '[' && pos_ + 1 < end_ && p_[pos_ + 1] == ':') fail("POSIX classes ([:alpha:]) are not supported");
    size_t p = pos_;
    const int64_t cp = decode_utf8(p_.substr(0, end_), p);
    if (cp < 0) fail("invalid UTF-8");
    pos_ = p;
    return cp;
  }
};

// How a code point is written inside a JSON string (JSON.stringify's choice: short escapes where JSON has
// them, \u00XX for the other control characters).
std::string json_spelling(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  std::string out;
  if (c < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
    return buf;
  }
  append_utf8(c, out);
  return out;
}

}  // namespace

Expr parse_regex(std::string_view pattern) { return RegexParser(pattern).parse(); }

Expr json_string_escaped(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kEmpty: return e;
    case Expr::Kind::kBytes: {
      std::string out;
      size_t pos = 0;
      while (pos < e.bytes.size()) {
        const int64_t cp = decode_utf8(e.bytes, pos);
        NANOVLLM_CHECK(cp >= 0, "grammar: a JSON string literal that is not valid UTF-8");
        out += json_spelling(static_cast<uint32_t>(cp));
      }
      return Expr::literal(out);
    }
    case Expr::Kind::kClass: {
      // Characters that need no escape stay one class; each that does becomes its escape literal.
      CodepointRanges plain, special;
      const CodepointRanges needs_escape = normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
      for (const auto& [lo, hi] : e.ranges) {
        for (const auto& [slo, shi] : needs_escape) {
          const uint32_t a = std::max(lo, slo), b = std::min(hi, shi);
          if (a <= b) special.emplace_back(a, b);
        }
      }
      const CodepointRanges allowed = complement_ranges(needs_escape);
      for (const auto& [lo, hi] : e.ranges) {
        for (const auto& [alo, ahi] : allowed) {
          const uint32_t a = std::max(lo, alo), b = std::min(hi, ahi);
          if (a <= b) plain.emplace_back(a, b);
        }
      }
      std::vector<Expr> choices;
      if (!plain.empty()) choices.push_back(Expr::cls(std::move(plain)));
      for (const auto& [lo, hi] : special)
        for (uint32_t c = lo; c <= hi; ++c) choices.push_back(Expr::literal(json_spelling(c)));
      return Expr::alt(std::move(choices));
    }
    case Expr::Kind::kRule: NANOVLLM_FAIL("grammar: json_string_escaped on a rule reference");
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt:
    case Expr::Kind::kRepeat: {
      Expr out = e;
      for (Expr& item : out.items) item = json_string_escaped(item);
      return out;
    }
  }
  return e;
}

}  // namespace nanovllm::grammar
