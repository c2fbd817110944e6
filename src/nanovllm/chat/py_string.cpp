#include "nanovllm/chat/py_string.h"

#include <algorithm>

#include "nanovllm/chat/jinja_value.h"
#include "nanovllm/chat/utf8.h"

namespace nanovllm::chat::py {

std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = utf8::decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8::decode(*chars);
  auto drop = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : utf8::is_space(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && drop(cps[b])) ++b;
  if (right)
    while (e > b && drop(cps[e - 1])) --e;
  return utf8::encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

static std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit, bool reverse) {
  auto cps = utf8::decode(s);
  if (reverse) std::reverse(cps.begin(), cps.end());
  std::vector<std::vector<char32_t>> parts;
  size_t i = 0;
  int64_t splits = 0;
  while (i < cps.size()) {
    while (i < cps.size() && utf8::is_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && splits >= maxsplit) {
      // Python keeps the remainder as is, only the whitespace before it (in scan order) is skipped.
      parts.emplace_back(cps.begin() + i, cps.end());
      i = cps.size();
      break;
    }
    size_t j = i;
    while (j < cps.size() && !utf8::is_space(cps[j])) ++j;
    parts.emplace_back(cps.begin() + i, cps.begin() + j);
    ++splits;
    i = j;
  }
  std::vector<std::string> out;
  for (auto& p : parts) {
    if (reverse) std::reverse(p.begin(), p.end());
    out.push_back(utf8::encode(p));
  }
  if (reverse) std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return split_ws(s, maxsplit, false);
  if (sep->empty()) throw jinja::TemplateError("split: empty separator");
  std::vector<std::string> out;
  size_t start = 0;
  int64_t n = 0;
  while (maxsplit < 0 || n < maxsplit) {
    const size_t at = s.find(*sep, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + sep->size();
    ++n;
  }
  out.push_back(s.substr(start));
  return out;
}

std::vector<std::string> rsplit(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (!sep) return split_ws(s, maxsplit, true);
  if (sep->empty()) throw jinja::TemplateError("rsplit: empty separator");
  std::vector<std::string> out;
  size_t end = s.size();
  int64_t n = 0;
  while (maxsplit < 0 || n < maxsplit) {
    if (end < sep->size()) break;
    const size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string::npos) break;
    out.push_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
    ++n;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl before every code point and at the end.
    const auto cps = utf8::decode(s);
    int64_t n = 0;
    for (char32_t cp : cps) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      utf8::append(out, cp);
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start);
    out += repl;
    start = at + old.size();
    ++n;
  }
  out += s.substr(start);
  return out;
}

static char lower_c(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
static char upper_c(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
static bool alpha_c(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = lower_c(c);
  return out;
}
std::string upper(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = upper_c(c);
  return out;
}
std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = upper_c(out[0]);
  return out;
}
std::string title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (alpha_c(c)) {
      c = prev_cased ? lower_c(c) : upper_c(c);
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}
std::string jinja_title(const std::string& s) {
  auto is_sep = [](char c) {
    return c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '(' ||
           c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    const bool sep = is_sep(s[i]);
    while (j < s.size() && is_sep(s[j]) == sep) ++j;
    std::string item = s.substr(i, j - i);
    if (!sep) {
      item = lower(item);
      item[0] = upper_c(item[0]);
    }
    out += item;
    i = j;
  }
  return out;
}

int64_t length(const std::string& s) {
  int64_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

int64_t find(const std::string& s, const std::string& sub, bool reverse) {
  const size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return length(s.substr(0, at));
}

int64_t count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return length(s) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace nanovllm::chat::py
