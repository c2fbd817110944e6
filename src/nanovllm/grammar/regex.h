// Regular expression -> grammar expression, for JSON Schema `pattern` and vLLM's `regex` / `guided_regex`.
// The whole output must match (a pattern's leading ^ and trailing $ are accepted and change nothing).
//
// Supported: literals; escapes \n \t \r \f \v \0 \xNN \uNNNN \u{N...} and escaped punctuation; classes
// [...] / [^...] with ranges and \d \w \s \D \W \S inside; `.` (any code point but the line terminators
// \n \r U+2028 U+2029); \d \w \s \D \W \S; groups ( ), (?: ), (?<name> ), (?P<name> ); alternation |;
// quantifiers * + ? {n} {n,} {n,m} (a lazy `?` after one changes nothing). \s stands for the ASCII
// whitespace characters (a subset of what every regex engine counts as \s, so the output matches in all),
// \S for everything that is not Unicode whitespace.
// Anything else — backreferences, lookaround, word boundaries, anchors inside the pattern, inline flags —
// is an Error naming it: the constraint would otherwise mean something other than what was asked.
#pragma once

#include <string_view>

#include "nanovllm/grammar/grammar.h"

namespace nanovllm::grammar {

Expr parse_regex(std::string_view pattern);

// The same text spelled inside a JSON string: `"` and `\` and control characters become their JSON
// escapes (`\"`, `\\`, `\n`, `\u001f`, ...). Literals and classes only (what parse_regex produces).
Expr json_string_escaped(const Expr& e);

}  // namespace nanovllm::grammar
