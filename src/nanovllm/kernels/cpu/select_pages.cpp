// Page selection within a budget: sink and recent pages always, then the top scores.
#include <algorithm>
#include <numeric>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"

namespace nanovllm::cpu {

void select_pages(TensorView selected, TensorView scores, TensorView context_lens, int64_t block_size,
                  int64_t sink_pages, int64_t recent_pages) {
  const int64_t S = scores.dim(0), Hk = scores.dim(1), MP = scores.dim(2), K = selected.dim(2);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const float* sc = scores.data_as<const float>();
  int32_t* out = selected.data_as<int32_t>();
  parallel_for(S * Hk, [&](int64_t b, int64_t e) {
    std::vector<int32_t> middle;
    for (int64_t item = b; item < e; ++item) {
      const int64_t pages = (int64_t{ctx[item / Hk]} + block_size - 1) / block_size;
      int32_t* list = out + item * K;
      std::fill(list, list + K, -1);
      if (pages <= K) {
        std::iota(list, list + pages, 0);
        continue;
      }
      // Pages [sink, pages - recent) compete for the K - sink - recent places left.
      const float* row = sc + item * MP;
      middle.resize(static_cast<size_t>(pages - sink_pages - recent_pages));
      std::iota(middle.begin(), middle.end(), static_cast<int32_t>(sink_pages));
      const auto take = static_cast<std::ptrdiff_t>(K - sink_pages - recent_pages);
      std::partial_sort(middle.begin(), middle.begin() + take, middle.end(), [&](int32_t x, int32_t y) {
        return row[x] > row[y] || (row[x] == row[y] && x < y);
      });
      std::sort(middle.begin(), middle.begin() + take);
      int64_t n = 0;
      for (int64_t p = 0; p < sink_pages; ++p) list[n++] = static_cast<int32_t>(p);
      for (std::ptrdiff_t i = 0; i < take; ++i) list[n++] = middle[static_cast<size_t>(i)];
      for (int64_t p = pages - recent_pages; p < pages; ++p) list[n++] = static_cast<int32_t>(p);
    }
  });
}

}  // namespace nanovllm::cpu
