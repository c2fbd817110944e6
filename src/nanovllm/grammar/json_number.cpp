#include "nanovllm/grammar/json_number.h"

#include <cmath>
#include <string>

#include "nanovllm/core/error.h"

namespace nanovllm::grammar {
namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

Expr digit(int lo, int hi) { return Expr::cls({{static_cast<uint32_t>('0' + lo), static_cast<uint32_t>('0' + hi)}}); }
Expr any_digits(size_t n) { return Expr::repeat(digit(0, 9), static_cast<int32_t>(n), static_cast<int32_t>(n)); }

// Decimal strings from a to b, both of the same length (leading zeros allowed here: these are suffixes).
Expr same_length(const std::string& a, const std::string& b) {
  if (a.empty()) return Expr::empty();
  if (a == b) return Expr::literal(a);
  if (a[0] == b[0]) return Expr::seq({Expr::literal(a.substr(0, 1)), same_length(a.substr(1), b.substr(1))});
  const size_t n = a.size() - 1;
  const bool rest_low = a.find_first_not_of('0', 1) == std::string::npos;
  const bool rest_high = b.find_first_not_of('9', 1) == std::string::npos;
  int first = a[0] - '0', last = b[0] - '0';
  std::vector<Expr> choices;
  if (!rest_low) {
    choices.push_back(Expr::seq({Expr::literal(a.substr(0, 1)), same_length(a.substr(1), std::string(n, '9'))}));
    ++first;
  }
  Expr high_end;
  if (!rest_high) {
    high_end = Expr::seq({Expr::literal(b.substr(0, 1)), same_length(std::string(n, '0'), b.substr(1))});
    --last;
  }
  if (first <= last) choices.push_back(Expr::seq({digit(first, last), any_digits(n)}));
  if (!rest_high) choices.push_back(std::move(high_end));
  return Expr::alt(std::move(choices));
}

uint64_t pow10(size_t n) {
  uint64_t v = 1;
  for (size_t i = 0; i < n; ++i) v *= 10;
  return v;
}

// Non-negative integers in [lo, hi] (hi unset: unbounded), without leading zeros.
Expr uint_range(uint64_t lo, std::optional<uint64_t> hi) {
  const size_t lo_len = std::to_string(lo).size();
  const size_t hi_len = hi ? std::to_string(*hi).size() : lo_len;
  std::vector<Expr> choices;
  for (size_t len = lo_len; len <= hi_len; ++len) {
    const uint64_t a = len == lo_len ? lo : pow10(len - 1);
    const uint64_t b = hi && len == hi_len ? *hi : pow10(len) - 1;
    if (a <= b) choices.push_back(same_length(std::to_string(a), std::to_string(b)));
  }
  if (!hi) choices.push_back(Expr::seq({digit(1, 9), Expr::repeat(digit(0, 9), static_cast<int32_t>(lo_len), -1)}));
  return Expr::alt(std::move(choices));
}

int64_t checked_integer(double v, const char* what) {
  NANOVLLM_CHECK(std::isfinite(v) && std::fabs(v) <= kMaxExactInteger, what, " ", v,
                 " is outside the supported range (+-2^53)");
  return static_cast<int64_t>(v);
}

Expr fraction() { return Expr::seq({Expr::literal("."), Expr::plus(digit(0, 9))}); }
Expr zero_fraction() { return Expr::optional(Expr::seq({Expr::literal("."), Expr::plus(Expr::literal("0"))})); }
Expr nonzero_fraction() {
  return Expr::seq({Expr::literal("."), Expr::star(digit(0, 9)), digit(1, 9), Expr::star(digit(0, 9))});
}

// Decimals v >= 0 written as integer part + optional fraction, with lo <= v (lo < v when !lo_incl) and
// v <= hi (v < hi when !hi_incl; hi unset: unbounded). Empty when the range is.
std::vector<Expr> unsigned_decimals(uint64_t lo, bool lo_incl, std::optional<uint64_t> hi, bool hi_incl) {
  std::vector<Expr> choices;
  if (hi && *hi < lo) return choices;
  if (hi && *hi == lo) {
    if (lo_incl && hi_incl) choices.push_back(Expr::seq({Expr::literal(std::to_string(lo)), zero_fraction()}));
    return choices;
  }
  // Integer part == lo.
  choices.push_back(Expr::seq({Expr::literal(std::to_string(lo)), lo_incl ? Expr::optional(fraction()) : nonzero_fraction()}));
  // lo < integer part < hi: any fraction.
  if (!hi || *hi >= lo + 2) {
    std::optional<uint64_t> top;
    if (hi) top = *hi - 1;
    choices.push_back(Expr::seq({uint_range(lo + 1, top), Expr::optional(fraction())}));
  }
  // Integer part == hi: only hi itself, when included.
  if (hi && hi_incl) choices.push_back(Expr::seq({Expr::literal(std::to_string(*hi)), zero_fraction()}));
  return choices;
}

}  // namespace

Expr json_integer_expr(const NumberBounds& b) {
  std::optional<int64_t> lo, hi;
  if (b.min) lo = checked_integer(b.min_exclusive ? std::floor(*b.min) + 1 : std::ceil(*b.min), "minimum");
  if (b.max) hi = checked_integer(b.max_exclusive ? std::ceil(*b.max) - 1 : std::floor(*b.max), "maximum");
  NANOVLLM_CHECK(!lo || !hi || *lo <= *hi, "no integer lies between the minimum and maximum");
  std::vector<Expr> choices;
  if (!hi || *hi >= 0) {  // 0 and up
    std::optional<uint64_t> top;
    if (hi) top = static_cast<uint64_t>(*hi);
    choices.push_back(uint_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, top));
  }
  if (!lo || *lo < 0) {  // negative: magnitudes from max(1, -hi) to -lo
    const uint64_t mag_lo = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> mag_hi;
    if (lo) mag_hi = static_cast<uint64_t>(-*lo);
    choices.push_back(Expr::seq({Expr::literal("-"), uint_range(mag_lo, mag_hi)}));
  }
  return Expr::alt(std::move(choices));
}

Expr json_number_expr(const NumberBounds& b) {
  if (!b.min && !b.max) {
    const Expr int_part = Expr::alt({Expr::literal("0"), Expr::seq({digit(1, 9), Expr::star(digit(0, 9))})});
    const Expr exponent = Expr::seq({Expr::cls({{'E', 'E'}, {'e', 'e'}}), Expr::optional(Expr::cls({{'+', '+'}, {'-', '-'}})),
                                     Expr::plus(digit(0, 9))});
    return Expr::seq({Expr::optional(Expr::literal("-")), int_part, Expr::optional(fraction()), Expr::optional(exponent)});
  }
  // A bound between whole numbers is moved inward to the next one (inclusive): every number generated
  // still satisfies the bound, some valid ones are never generated.
  NumberBounds w = b;
  if (w.min && std::floor(*w.min) != *w.min) {
    w.min = std::ceil(*w.min);
    w.min_exclusive = false;
  }
  if (w.max && std::floor(*w.max) != *w.max) {
    w.max = std::floor(*w.max);
    w.max_exclusive = false;
  }
  std::optional<int64_t> lo, hi;
  if (w.min) lo = checked_integer(*w.min, w.min_exclusive ? "exclusiveMinimum" : "minimum");
  if (w.max) hi = checked_integer(*w.max, w.max_exclusive ? "exclusiveMaximum" : "maximum");
  NANOVLLM_CHECK(!lo || !hi || *lo < *hi || (*lo == *hi && !w.min_exclusive && !w.max_exclusive),
                 "no number between the minimum and maximum can be generated (bounds are rounded inward to whole "
                 "numbers)");
  std::vector<Expr> choices;
  // v >= 0.
  if (!hi || *hi > 0 || (*hi == 0 && !w.max_exclusive)) {
    const bool from_zero = !lo || *lo < 0;
    std::optional<uint64_t> top;
    if (hi) top = static_cast<uint64_t>(*hi);
    for (Expr& e : unsigned_decimals(from_zero ? 0 : static_cast<uint64_t>(*lo), from_zero || !w.min_exclusive, top,
                                     !w.max_exclusive))
      choices.push_back(std::move(e));
  }
  // v < 0: magnitude m in (max(0, -hi), -lo].
  if (!lo || *lo < 0) {
    const bool below_zero = hi && *hi < 0;
    std::optional<uint64_t> top;
    if (lo) top = static_cast<uint64_t>(-*lo);
    std::vector<Expr> neg = unsigned_decimals(below_zero ? static_cast<uint64_t>(-*hi) : 0,
                                              below_zero && !w.max_exclusive, top, !w.min_exclusive);
    if (!neg.empty()) choices.push_back(Expr::seq({Expr::literal("-"), Expr::alt(std::move(neg))}));
  }
  NANOVLLM_CHECK(!choices.empty(), "no number lies between the minimum and maximum");
  return Expr::alt(std::move(choices));
}

}  // namespace nanovllm::grammar
