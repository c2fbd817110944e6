// Python str methods over UTF-8 strings (code-point semantics where Python has them).
// Case mapping is ASCII-only (non-ASCII letters are left as they are).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nanovllm::chat::py {

// str.strip/lstrip/rstrip(chars): chars == nullopt strips Unicode whitespace.
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / str.rsplit; sep == nullopt splits on whitespace runs. Empty sep throws.
std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(const std::string& s);
std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string lower(const std::string& s);
std::string upper(const std::string& s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);        // Python str.title()
std::string jinja_title(const std::string& s);  // jinja2's |title filter (splits on [-\s({[<]+)
int64_t find(const std::string& s, const std::string& sub, bool reverse);  // code-point index or -1
int64_t count(const std::string& s, const std::string& sub);
bool starts_with(const std::string& s, const std::string& prefix);
bool ends_with(const std::string& s, const std::string& suffix);
int64_t length(const std::string& s);  // code points

}  // namespace nanovllm::chat::py
