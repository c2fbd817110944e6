#include "nanovllm/grammar/grammar.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "nanovllm/core/error.h"

namespace nanovllm::grammar {

CodepointRanges normalize_ranges(CodepointRanges ranges) {
  CodepointRanges split;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi > 0xDFFF) {
      split.emplace_back(lo, 0xD7FF);
      split.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && hi <= 0xDFFF) {
      continue;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      split.emplace_back(0xE000, hi);
    } else if (hi >= 0xD800 && hi <= 0xDFFF) {
      split.emplace_back(lo, 0xD7FF);
    } else {
      split.emplace_back(lo, hi);
    }
  }
  std::sort(split.begin(), split.end());
  CodepointRanges out;
  for (const auto& r : split) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodepointRanges complement_ranges(const CodepointRanges& ranges) {
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return normalize_ranges(std::move(out));
}

Expr Expr::literal(std::string_view s) {
  Expr e;
  if (s.empty()) return e;
  e.kind = Kind::kBytes;
  e.bytes = std::string(s);
  return e;
}

Expr Expr::cls(CodepointRanges ranges) {
  Expr e;
  e.kind = Kind::kClass;
  e.ranges = normalize_ranges(std::move(ranges));
  NANOVLLM_CHECK(!e.ranges.empty(), "grammar: a character class that matches nothing");
  return e;
}

Expr Expr::ref(int32_t rule_id) {
  Expr e;
  e.kind = Kind::kRule;
  e.rule = rule_id;
  return e;
}

Expr Expr::seq(std::vector<Expr> items) {
  Expr e;
  e.kind = Kind::kSeq;
  for (Expr& item : items) {
    if (item.kind == Kind::kEmpty) continue;
    if (item.kind == Kind::kSeq) {
      for (Expr& sub : item.items) e.items.push_back(std::move(sub));
    } else if (item.kind == Kind::kBytes && !e.items.empty() && e.items.back().kind == Kind::kBytes) {
      e.items.back().bytes += item.bytes;  // adjacent literals join
    } else {
      e.items.push_back(std::move(item));
    }
  }
  if (e.items.empty()) return empty();
  if (e.items.size() == 1) return std::move(e.items[0]);
  return e;
}

Expr Expr::alt(std::vector<Expr> items) {
  NANOVLLM_CHECK(!items.empty(), "grammar: an alternative with no choices");
  Expr e;
  e.kind = Kind::kAlt;
  for (Expr& item : items) {
    if (item.kind == Kind::kAlt) {
      for (Expr& sub : item.items) e.items.push_back(std::move(sub));
    } else {
      e.items.push_back(std::move(item));
    }
  }
  if (e.items.size() == 1) return std::move(e.items[0]);
  return e;
}

Expr Expr::repeat(Expr inner, int32_t min, int32_t max) {
  NANOVLLM_CHECK(min >= 0 && (max < 0 || max >= min), "grammar: repetition {", min, ",", max, "} is invalid");
  if (max == 0 || inner.kind == Kind::kEmpty) return empty();
  if (min == 1 && max == 1) return inner;
  Expr e;
  e.kind = Kind::kRepeat;
  e.min = min;
  e.max = max;
  e.items.push_back(std::move(inner));
  return e;
}

bool is_rule_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

int32_t Grammar::add_rule(const std::string& name) {
  NANOVLLM_CHECK(is_rule_name(name), "grammar: '", name, "' is not a rule name ([A-Za-z0-9_-]+)");
  NANOVLLM_CHECK(find(name) < 0, "grammar: rule '", name, "' is defined twice");
  rules_.push_back({name, Expr::empty()});
  return static_cast<int32_t>(rules_.size() - 1);
}

int32_t Grammar::add_rule_unique(std::string_view hint) {
  std::string base;
  for (char c : hint.substr(0, 48)) base += is_rule_name(std::string_view(&c, 1)) ? c : '_';
  if (base.empty()) base = "rule";
  std::string name = base;
  for (int n = 2; find(name) >= 0; ++n) name = base + "-" + std::to_string(n);
  return add_rule(name);
}

void Grammar::set_body(int32_t rule, Expr body) {
  NANOVLLM_CHECK(rule >= 0 && rule < static_cast<int32_t>(rules_.size()), "grammar: no rule ", rule);
  rules_[static_cast<size_t>(rule)].body = std::move(body);
}

int32_t Grammar::find(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

int32_t Grammar::import(const Grammar& other) {
  NANOVLLM_CHECK(other.root_ >= 0, "grammar: importing a grammar without a root rule");
  const int32_t offset = static_cast<int32_t>(rules_.size());
  for (const Rule& r : other.rules_) add_rule_unique(r.name);
  std::function<void(Expr&)> shift = [&](Expr& e) {
    if (e.kind == Expr::Kind::kRule) e.rule += offset;
    for (Expr& sub : e.items) shift(sub);
  };
  for (size_t i = 0; i < other.rules_.size(); ++i) {
    Expr body = other.rules_[i].body;
    shift(body);
    rules_[static_cast<size_t>(offset) + i].body = std::move(body);
  }
  return offset + other.root_;
}

std::string quote_literal(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

// A code point inside [...]: printable ASCII as itself (escaping the class's metacharacters), else \uXXXX
// or \UXXXXXXXX, so the printed grammar is ASCII apart from literals.
std::string class_char(uint32_t c) {
  if (c == ']' || c == '[' || c == '\\' || c == '^' || c == '-') return std::string("\\") + static_cast<char>(c);
  if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
  char buf[16];
  if (c <= 0xFFFF) {
    std::snprintf(buf, sizeof(buf), "\\u%04X", c);
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08X", c);
  }
  return buf;
}

void print_expr(const Grammar& g, const Expr& e, std::string& out, bool nested) {
  switch (e.kind) {
    case Expr::Kind::kEmpty: out += "\"\""; break;
    case Expr::Kind::kBytes: out += quote_literal(e.bytes); break;
    case Expr::Kind::kClass: {
      out += "[";
      for (const auto& [lo, hi] : e.ranges) {
        out += class_char(lo);
        if (hi != lo) out += "-" + class_char(hi);
      }
      out += "]";
      break;
    }
    case Expr::Kind::kRule: out += g.rule(e.rule).name; break;
    case Expr::Kind::kSeq:
    case Expr::Kind::kAlt: {
      const bool alt = e.kind == Expr::Kind::kAlt;
      if (nested) out += "(";
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i > 0) out += alt ? " | " : " ";
        print_expr(g, e.items[i], out, alt ? e.items[i].kind == Expr::Kind::kAlt : true);
      }
      if (nested) out += ")";
      break;
    }
    case Expr::Kind::kRepeat: {
      const Expr& inner = e.items[0];
      const bool atom = inner.kind == Expr::Kind::kBytes || inner.kind == Expr::Kind::kClass ||
                        inner.kind == Expr::Kind::kRule;
      if (!atom) out += "(";
      print_expr(g, inner, out, false);
      if (!atom) out += ")";
      if (e.min == 0 && e.max == 1) {
        out += "?";
      } else if (e.min == 0 && e.max < 0) {
        out += "*";
      } else if (e.min == 1 && e.max < 0) {
        out += "+";
      } else if (e.max < 0) {
        out += "{" + std::to_string(e.min) + ",}";
      } else if (e.min == e.max) {
        out += "{" + std::to_string(e.min) + "}";
      } else {
        out += "{" + std::to_string(e.min) + "," + std::to_string(e.max) + "}";
      }
      break;
    }
  }
}

}  // namespace

std::string Grammar::to_ebnf() const {
  std::string out;
  auto print_rule = [&](const Rule& r) {
    out += r.name + " ::= ";
    print_expr(*this, r.body, out, false);
    out += "\n";
  };
  if (root_ >= 0) print_rule(rules_[static_cast<size_t>(root_)]);
  for (size_t i = 0; i < rules_.size(); ++i)
    if (static_cast<int32_t>(i) != root_) print_rule(rules_[i]);
  return out;
}

}  // namespace nanovllm::grammar
