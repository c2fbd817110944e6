// XAttention's estimate: per query head, the attention of stride-tile rows over stride-tile columns from antidiagonal
// sums, block sums of its softmax, and per query block the blocks that cover tau of the mass; with max_blocks the
// group's union is trimmed by rank (kBlockBudget).
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_pattern_estimators.h"

namespace nanovllm::cpu {

void xattention_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                         const int32_t* block_table, const PrefillChunk& c, const ops::XAttentionParams& p) {
  const int64_t S = p.stride, D = c.D, ctx = c.ctx, first = c.first_block(), NQB = c.num_blocks();
  const ChunkQueries qs(q, c);
  const std::vector<float> ks = keys_by_head(k_cache, block_table, ctx);  // [Hk][ctx][D]
  PatternSets sets(c, p.max_blocks);
  // Tile (m, n) pairs query m S + S - 1 - s with key n S + s (s < S): its antidiagonal. The reference's reshaped q.k,
  // scaled by scale / S; tiles n <= m are the causal ones (the diagonal tile whole).
  const float tile_scale = c.scale / static_cast<float>(S);
  parallel_for(c.Hk * (NQB - first), [&](int64_t b, int64_t e) {
    std::vector<float> row;
    std::vector<double> mass;
    for (int64_t item = b; item < e; ++item) {
      const int64_t h = item / (NQB - first), i = first + item % (NQB - first);
      if (p.threshold >= 1) {
        sets.add_causal_row(h, i);
        continue;
      }
      const float* kh = &ks[static_cast<size_t>(h * ctx * D)];
      for (int64_t g = h * c.group(); g < (h + 1) * c.group(); ++g) {
        mass.assign(static_cast<size_t>(i + 1), 0.0);
        // Tile rows with a query of the chunk in block i.
        for (int64_t m = c.row_begin(i) / S; m * S < c.row_end(i); ++m) {
          row.assign(static_cast<size_t>(m + 1), 0.0f);
          for (int64_t n = 0; n <= m; ++n)
            for (int64_t s = 0; s < S; ++s) {
              const int64_t qp = m * S + S - 1 - s, kp = n * S + s;
              if (qp < c.start() || qp >= ctx || kp >= ctx) continue;
              row[static_cast<size_t>(n)] += dot(qs.row(g, qp - c.start(), kp), kh + kp * D, D);
            }
          for (float& x : row) x *= tile_scale;
          softmax(row.data(), m + 1);
          for (int64_t n = 0; n <= m; ++n) mass[static_cast<size_t>(n * S / c.B)] += row[static_cast<size_t>(n)];
        }
        for (int32_t j : cover_mass(mass, {0, static_cast<int32_t>(i)}, p.threshold)) sets.add_block(h, i, j);
        sets.rank_blocks(h, i, mass);
      }
    }
  });
  sets.write(out.block_counts, out.block_index, out.column_counts, out.column_index);
}

}  // namespace nanovllm::cpu
