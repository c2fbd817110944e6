// MInference's vertical-slash estimate: the chunk's last queries' causal softmax, summed per key column (vertical) and
// per diagonal (slash = query position - key position); the top columns and diagonals of each query head, sinks and
// recent diagonals forced, the union over the GQA group. A slash becomes, for each query block, the key blocks its
// diagonal crosses; a vertical outside those blocks, a column.
#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_pattern_estimators.h"

namespace nanovllm::cpu {
namespace {

// The `count` indices of the largest scores (ties: the lower index).
std::vector<int32_t> top_indices(const std::vector<float>& score, int64_t count) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto k = static_cast<std::ptrdiff_t>(std::min<int64_t>(count, static_cast<int64_t>(score.size())));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)] ||
           (score[static_cast<size_t>(a)] == score[static_cast<size_t>(b)] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace

void vertical_slash_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                             const int32_t* block_table, const PrefillChunk& c, const ops::VerticalSlashParams& p) {
  const int64_t D = c.D, T = c.T, ctx = c.ctx, B = c.B, first = c.first_block(), NQB = c.num_blocks();
  const ChunkQueries qs(q, c);
  const std::vector<float> ks = keys_by_head(k_cache, block_table, ctx);
  const int64_t last = std::min(p.last_q, T);
  constexpr float kForced = std::numeric_limits<float>::infinity();
  PatternSets sets(c);
  parallel_for(c.Hk, [&](int64_t b, int64_t e) {
    std::vector<float> vertical, slash, row;
    for (int64_t h = b; h < e; ++h) {
      const float* kh = &ks[static_cast<size_t>(h * ctx * D)];
      std::vector<uint8_t> is_vertical(static_cast<size_t>(ctx), 0), is_slash(static_cast<size_t>(ctx), 0);
      for (int64_t g = h * c.group(); g < (h + 1) * c.group(); ++g) {
        vertical.assign(static_cast<size_t>(ctx), 0.0f);
        slash.assign(static_cast<size_t>(ctx), 0.0f);
        for (int64_t t = T - last; t < T; ++t) {
          const int64_t pos = c.start() + t;
          row.resize(static_cast<size_t>(pos + 1));
          for (int64_t k = 0; k <= pos; ++k)
            row[static_cast<size_t>(k)] = c.scale * dot(qs.row(g, t, k), kh + k * D, D);
          softmax(row.data(), pos + 1);
          for (int64_t k = 0; k <= pos; ++k) {
            vertical[static_cast<size_t>(k)] += row[static_cast<size_t>(k)];
            slash[static_cast<size_t>(pos - k)] += row[static_cast<size_t>(k)];
          }
        }
        std::fill(vertical.begin(), vertical.begin() + std::min(p.sink_tokens, ctx), kForced);
        std::fill(slash.begin(), slash.begin() + std::min(p.recent_diagonals, ctx), kForced);
        for (int32_t k : top_indices(vertical, p.vertical)) is_vertical[static_cast<size_t>(k)] = 1;
        for (int32_t d : top_indices(slash, p.slash)) is_slash[static_cast<size_t>(d)] = 1;
      }
      for (int64_t i = first; i < NQB; ++i) {
        const int64_t r0 = c.row_begin(i), r1 = c.row_end(i);
        // Diagonal d meets rows [r0, r1) at keys [r0 - d, r1 - 1 - d].
        for (int64_t d = 0; d < r1; ++d) {
          if (!is_slash[static_cast<size_t>(d)]) continue;
          const int64_t lo = std::max<int64_t>(r0 - d, 0), hi = r1 - 1 - d;
          for (int64_t j = lo / B; j <= hi / B; ++j) sets.add_block(h, i, j);
        }
        for (int64_t k = 0; k < i * B; ++k)
          if (is_vertical[static_cast<size_t>(k)]) sets.add_column(h, i, k);
      }
    }
  });
  sets.write(out.block_counts, out.block_index, out.column_counts, out.column_index);
}

}  // namespace nanovllm::cpu
