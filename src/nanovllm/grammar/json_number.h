// Decimal numbers within bounds as grammar expressions (JSON Schema minimum / maximum / exclusiveMinimum /
// exclusiveMaximum): the digit strings of an integer range, built digit by digit like the classic
// range-to-regex construction, and JSON numbers between bounds, where a bound that is not a whole number is
// moved inward to the next whole number (a grammar cannot compare arbitrary decimals cheaply; generating a
// smaller range keeps every number valid, widening it never happens).
#pragma once

#include <cstdint>
#include <optional>

#include "nanovllm/grammar/grammar.h"

namespace nanovllm::grammar {

struct NumberBounds {
  std::optional<double> min, max;  // the value must be >= min (> min when min_exclusive), <= / < max
  bool min_exclusive = false, max_exclusive = false;
};

// JSON integers (no fraction, no exponent, no leading zeros, no "-0") within `bounds`. Bounds beyond
// +-2^53 and empty ranges are Errors naming them.
Expr json_integer_expr(const NumberBounds& bounds);
// JSON numbers within `bounds`: with no bounds any JSON number; with bounds, integer part and fraction
// (no exponent), non-integer bounds rounded inward; a range with no whole number in it is an Error.
Expr json_number_expr(const NumberBounds& bounds);

}  // namespace nanovllm::grammar
