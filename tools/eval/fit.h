// Fitting a prompt to a token budget: the largest number of haystack units whose prompt, encoded with
// the model's tokenizer, has at most `budget` tokens (RULER grows its haystack until prompt +
// tokens_to_generate reaches max_seq_length). Token counts are measured, never estimated: secant steps on
// measured counts find the bracket in a few encodes of the full prompt.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nanovllm::eval {

struct FitResult {
  bool fits = false;          // false: even min_units is over budget (min_tokens says by how much)
  int64_t units = 0;
  int64_t min_tokens = 0;     // tokens of the min_units prompt
  int64_t encodes = 0;        // full-prompt encodes it took
  std::string text;           // the chosen prompt and its ids
  std::vector<int32_t> ids;
};

// prompt(units) -> text; encode(text) -> ids. `prompt` must not shrink as units grow (a small dip from
// tokenization is tolerated: the result is then a largest unit count whose next one does not fit).
// Deterministic: the steps depend only on the measured counts.
FitResult fit_to_budget(const std::function<std::string(int64_t)>& prompt,
                        const std::function<std::vector<int32_t>(const std::string&)>& encode, int64_t min_units,
                        int64_t max_units, int64_t budget);

}  // namespace nanovllm::eval
