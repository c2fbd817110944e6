// AvgPool's estimate, per query head and query block of the chunk: the block-mean query (the chunk's rows of the block)
// against every causal key block's mean key, softmax over those key blocks, and the blocks covering `threshold` of that
// mass (sink and diagonal first); with max_blocks the group's union is trimmed by rank (kBlockBudget). The chunk's last
// query block is scored by its last query instead: per key block the log-sum-exp of that query's exact logits, whose
// softmax is the share of the query's attention each block holds (the token sampled after a prompt reads that row, and
// a block-mean query misses what it attends: issue 46).
#include <algorithm>
#include <cmath>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_pattern_estimators.h"

namespace nanovllm::cpu {
namespace {

// score[j] for key blocks j <= i: log sum_{k in block j} exp(scale x q . k), the logits in fp32 (dot()), the block's
// max and exponential sum in double. The chunk's last query row of head g; kh [ctx][D], one KV head's keys.
void last_query_scores(std::vector<float>& score, const ChunkQueries& qs, int64_t g, const float* kh,
                       const PrefillChunk& c, int64_t i) {
  std::vector<double> logits;
  for (int64_t j = 0; j <= i; ++j) {
    logits.clear();
    for (int64_t k = j * c.B; k < c.key_end(j); ++k)
      logits.push_back(c.scale * dot(qs.row(g, c.T - 1, k), kh + k * c.D, c.D));
    const double m = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double x : logits) sum += std::exp(x - m);
    score[static_cast<size_t>(j)] = static_cast<float>(m + std::log(sum));
  }
}

}  // namespace

void avgpool_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                      const int32_t* block_table, const PrefillChunk& c, const ops::AvgPoolParams& p) {
  const int64_t D = c.D, ctx = c.ctx, B = c.B, first = c.first_block(), NQB = c.num_blocks();
  const ChunkQueries qs(q, c);
  const std::vector<float> ks = keys_by_head(k_cache, block_table, ctx);
  PatternSets sets(c, p.max_blocks);
  parallel_for(c.Hk, [&](int64_t b, int64_t e) {
    std::vector<float> score;
    std::vector<double> mass;
    for (int64_t h = b; h < e; ++h) {
      if (p.threshold >= 1) {
        for (int64_t i = first; i < NQB; ++i) sets.add_causal_row(h, i);
        continue;
      }
      std::vector<float> mean_k(static_cast<size_t>(NQB * D), 0.0f);  // [NQB][D]
      for (int64_t k = 0; k < ctx; ++k)
        for (int64_t d = 0; d < D; ++d)
          mean_k[static_cast<size_t>(k / B * D + d)] += ks[static_cast<size_t>((h * ctx + k) * D + d)];
      for (int64_t j = 0; j < NQB; ++j)
        for (int64_t d = 0; d < D; ++d)
          mean_k[static_cast<size_t>(j * D + d)] /= static_cast<float>(c.key_end(j) - j * B);
      for (int64_t g = h * c.group(); g < (h + 1) * c.group(); ++g) {
        for (int64_t i = first; i < NQB; ++i) {
          score.resize(static_cast<size_t>(i + 1));
          if (i == NQB - 1) {
            last_query_scores(score, qs, g, &ks[static_cast<size_t>(h * ctx * D)], c, i);
          } else {
            RowMeans mean_q(qs, g, c.row_begin(i) - c.start(), c.row_end(i) - c.start(), D);
            for (int64_t j = 0; j <= i; ++j)
              score[static_cast<size_t>(j)] =
                  c.scale * dot(mean_q.at(j * B).data(), &mean_k[static_cast<size_t>(j * D)], D);
          }
          softmax(score.data(), i + 1);
          mass.assign(score.begin(), score.end());
          for (int32_t j : cover_mass(mass, {0, static_cast<int32_t>(i)}, p.threshold)) sets.add_block(h, i, j);
          sets.rank_blocks(h, i, mass);
        }
      }
    }
  });
  sets.write(out.block_counts, out.block_index, out.column_counts, out.column_index);
}

}  // namespace nanovllm::cpu
