// EBNF text -> Grammar, the GBNF-like dialect of llama.cpp and xgrammar (what vLLM's `guided_grammar`
// carries):
//
//   root   ::= "{" ws pair ("," ws pair)* "}"      # a comment runs to the end of the line
//   pair   ::= [a-z]+ ":" ws ( digits | "null" )
//   digits ::= [0-9]{1,5}
//
// Rules are `name ::= expression`; a new rule starts at a `name ::=`, so rules may span lines. The root is
// the rule named `root`, else the first one. Expressions: "literal" and 'literal' (escapes \n \t \r \\ \"
// \' \xNN (a byte) \uXXXX \UXXXXXXXX (a code point)), [class] / [^class] of code points (ranges a-z, the
// same escapes, \xNN a code point), `.` (any code point), rule names, ( ), |, and the postfix operators
// * + ? {m} {m,} {m,n}. Errors name the line and column.
#pragma once

#include <string_view>

#include "nanovllm/grammar/grammar.h"

namespace nanovllm::grammar {

// Throws nanovllm::Error ("grammar line L col C: ...") for bad syntax and undefined or duplicate rules.
Grammar parse_ebnf(std::string_view text);

}  // namespace nanovllm::grammar
