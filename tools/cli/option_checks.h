// Range checks of numeric option values, attached to CLI11 options with ->check(...). They run while
// the command line is parsed, so a bad value is a usage error (exit 1) that names the flag and the value:
// "--max-tokens must be >= 1, got -5". A value that is not a number at all is left to CLI11's conversion
// ("--max-tokens expects an integer, got 'x'").
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "nanovllm/core/limits.h"

namespace nanovllm::cli {

// Upper bounds of the tools' numbers, so that no product of them overflows: lengths are positions
// (kMaxPositions, 2^24), counts (requests, sequences, batches) at most 2^20.
inline constexpr int64_t kMaxCount = int64_t{1} << 20;

CLI::Validator at_least(double lo);                  // v >= lo
CLI::Validator greater_than(double lo);              // v > lo
CLI::Validator in_range(double lo, double hi);       // lo <= v <= hi
CLI::Validator in_range_above(double lo, double hi); // lo < v <= hi

}  // namespace nanovllm::cli
