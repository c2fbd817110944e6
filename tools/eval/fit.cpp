#include "eval/fit.h"

#include <algorithm>
#include <cmath>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {

FitResult fit_to_budget(const std::function<std::string(int64_t)>& prompt,
                        const std::function<std::vector<int32_t>(const std::string&)>& encode, int64_t min_units,
                        int64_t max_units, int64_t budget) {
  NANOVLLM_CHECK(min_units >= 0 && max_units >= min_units, "fit_to_budget: bad unit range ", min_units, "..",
                 max_units);
  FitResult best;
  auto measure = [&](int64_t units, std::string& text, std::vector<int32_t>& ids) {
    text = prompt(units);
    ids = encode(text);
    ++best.encodes;
    return static_cast<int64_t>(ids.size());
  };

  std::string text;
  std::vector<int32_t> ids;
  int64_t lo = min_units, t_lo = measure(lo, best.text, best.ids);
  best.min_tokens = t_lo;
  if (t_lo > budget) return best;
  best.fits = true;
  best.units = lo;
  const int64_t t_min = t_lo;

  // [lo, hi): lo fits; hi does not (or is past max_units, t_hi unknown).
  int64_t hi = max_units + 1, t_hi = -1;
  // Tokens per unit: from a small probe first, then from the measured points.
  double rate = 0;
  {
    const int64_t p = std::min(max_units, lo + 16);
    if (p == lo) return best;
    const int64_t t = measure(p, text, ids);
    rate = std::max(static_cast<double>(t - t_lo) / static_cast<double>(p - lo), 0.05);
    if (t <= budget) {
      lo = p, t_lo = t;
      best.units = p, best.text = std::move(text), best.ids = std::move(ids);
    } else {
      hi = p, t_hi = t;
    }
  }
  for (int iter = 0; hi - lo > 1; ++iter) {
    int64_t guess;
    if (iter >= 16) {  // the secant steps stalled (tokenization far from linear): bisect
      guess = hi > max_units ? std::min(max_units, lo * 2 + 1) : lo + (hi - lo) / 2;
    } else if (t_hi >= 0) {  // interpolate inside the bracket
      guess = lo + static_cast<int64_t>(std::floor(static_cast<double>(budget - t_lo) * static_cast<double>(hi - lo) /
                                                   static_cast<double>(std::max<int64_t>(t_hi - t_lo, 1))));
    } else {
      guess = lo + static_cast<int64_t>(std::floor(static_cast<double>(budget - t_lo) / rate));
    }
    guess = std::clamp(guess, lo + 1, hi - 1);
    const int64_t t = measure(guess, text, ids);
    if (t <= budget) {
      lo = guess, t_lo = t;
      best.units = guess, best.text = std::move(text), best.ids = std::move(ids);
      rate = std::max(static_cast<double>(t_lo - t_min) / static_cast<double>(lo - min_units), 0.05);
    } else {
      hi = guess, t_hi = t;
    }
  }
  return best;
}

}  // namespace nanovllm::eval
