#include "option_checks.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace nanovllm::cli {
namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A validator from a predicate on the value and a description of the allowed range ("in [0, 1]").
CLI::Validator range_check(std::function<bool(double)> ok, const std::string& allowed) {
  return CLI::Validator(
      [ok = std::move(ok), allowed](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "";  // not a number: CLI11's conversion reports it
        if (!std::isfinite(v)) return "must be a finite number, got " + text;
        if (!ok(v)) return "must be " + allowed + ", got " + text;
        return "";
      },
      allowed);
}

}  // namespace

CLI::Validator at_least(double lo) {
  return range_check([lo](double v) { return v >= lo; }, ">= " + num(lo));
}

CLI::Validator greater_than(double lo) {
  return range_check([lo](double v) { return v > lo; }, "> " + num(lo));
}

CLI::Validator in_range(double lo, double hi) {
  return range_check([lo, hi](double v) { return v >= lo && v <= hi; }, "in [" + num(lo) + ", " + num(hi) + "]");
}

CLI::Validator in_range_above(double lo, double hi) {
  return range_check([lo, hi](double v) { return v > lo && v <= hi; }, "in (" + num(lo) + ", " + num(hi) + "]");
}

}  // namespace nanovllm::cli
