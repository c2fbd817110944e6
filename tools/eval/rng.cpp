#include "eval/rng.h"

#include <algorithm>
#include <numeric>

namespace nanovllm::eval {

std::vector<size_t> Rng::sample(size_t n, size_t k) {
  std::vector<size_t> out;
  out.reserve(k);
  if (k * 4 >= n) {  // dense: a partial Fisher-Yates over all n
    std::vector<size_t> all(n);
    std::iota(all.begin(), all.end(), size_t{0});
    for (size_t i = 0; i < k; ++i) {
      std::swap(all[i], all[i + static_cast<size_t>(below(n - i))]);
      out.push_back(all[i]);
    }
    return out;
  }
  while (out.size() < k) {  // sparse: redraw repeats (k is a handful)
    const size_t x = static_cast<size_t>(below(n));
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  return out;
}

}  // namespace nanovllm::eval
