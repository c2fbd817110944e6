// FlexPrefill's estimate, per query head: the causal softmax of the chunk's last block of queries gives the true
// attention over key positions; pooled per block it is compared (sqrt Jensen-Shannon) with the estimate from the
// block-mean query and keys. Close (< tau): the head is query-aware and keeps, over the chunk's query blocks, the
// pooled q.k block scores covering gamma of their mass. Otherwise it keeps the vertical blocks (key block columns) and
// slash blocks (block diagonals) covering gamma of the last queries' attention. Both keep at least ceil(min_budget /
// block) vertical and slash blocks.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_pattern_estimators.h"

namespace nanovllm::cpu {
namespace {

// Entries of x (non-negative) needed, largest first, to reach gamma x the total (gamma < 1).
int64_t cover_count(std::vector<double> x, double gamma) {
  std::sort(x.begin(), x.end(), std::greater<>());
  const double need = gamma * std::accumulate(x.begin(), x.end(), 0.0);
  double sum = 0;
  int64_t n = 0;
  while (n < static_cast<int64_t>(x.size()) && sum < need) sum += x[static_cast<size_t>(n++)];
  return std::max<int64_t>(n, 1);
}

// sqrt of the Jensen-Shannon divergence of distributions p and q (natural log).
double js_distance(const std::vector<double>& p, const std::vector<double>& q) {
  double js = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double m = (p[i] + q[i]) / 2;
    if (p[i] > 0) js += 0.5 * p[i] * std::log(p[i] / m);
    if (q[i] > 0) js += 0.5 * q[i] * std::log(q[i] / m);
  }
  return std::sqrt(std::max(js, 0.0));
}

// The indices of the `count` largest entries, `forced` first.
std::vector<int32_t> top_blocks(const std::vector<double>& score, int64_t count, int32_t forced) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    if ((a == forced) != (b == forced)) return a == forced;
    return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
  });
  idx.resize(static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(idx.size()))));
  return idx;
}

// Mean over rows [r0, r1) of x [rows][D].
std::vector<float> mean_rows(const float* x, int64_t r0, int64_t r1, int64_t D) {
  std::vector<float> m(static_cast<size_t>(D), 0.0f);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t d = 0; d < D; ++d) m[static_cast<size_t>(d)] += x[r * D + d];
  for (float& v : m) v /= static_cast<float>(r1 - r0);
  return m;
}

}  // namespace

void flexprefill_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                          const int32_t* block_table, const PrefillChunk& c, const ops::FlexPrefillParams& p) {
  const int64_t D = c.D, T = c.T, ctx = c.ctx, B = c.B, first = c.first_block(), NQB = c.num_blocks();
  const ChunkQueries qs(q, c);
  const std::vector<float> ks = keys_by_head(k_cache, block_table, ctx);
  const int64_t last = std::min(B, T);
  const int64_t budget_blocks = std::min((p.min_budget + B - 1) / B, NQB);
  PatternSets sets(c);
  parallel_for(c.Hk, [&](int64_t b, int64_t e) {
    std::vector<float> row;
    for (int64_t h = b; h < e; ++h) {
      const float* kh = &ks[static_cast<size_t>(h * ctx * D)];
      if (p.gamma >= 1) {
        for (int64_t i = first; i < NQB; ++i) sets.add_causal_row(h, i);
        continue;
      }
      std::vector<std::vector<float>> mean_k;  // [NQB][D]
      for (int64_t j = 0; j < NQB; ++j) mean_k.push_back(mean_rows(kh, j * B, c.key_end(j), D));
      for (int64_t g = h * c.group(); g < (h + 1) * c.group(); ++g) {
        // The last queries' attention: mean over queries per key position and per diagonal.
        std::vector<double> vertical(static_cast<size_t>(ctx), 0.0), slash(static_cast<size_t>(ctx), 0.0);
        for (int64_t t = T - last; t < T; ++t) {
          const int64_t pos = c.start() + t;
          row.resize(static_cast<size_t>(pos + 1));
          for (int64_t k = 0; k <= pos; ++k)
            row[static_cast<size_t>(k)] = c.scale * dot(qs.row(g, t, k), kh + k * D, D);
          softmax(row.data(), pos + 1);
          for (int64_t k = 0; k <= pos; ++k) {
            vertical[static_cast<size_t>(k)] += row[static_cast<size_t>(k)] / static_cast<double>(last);
            slash[static_cast<size_t>(pos - k)] += row[static_cast<size_t>(k)] / static_cast<double>(last);
          }
        }
        std::vector<double> vertical_blocks(static_cast<size_t>(NQB), 0.0), slash_blocks(static_cast<size_t>(NQB), 0.0);
        for (int64_t k = 0; k < ctx; ++k) {
          vertical_blocks[static_cast<size_t>(k / B)] += vertical[static_cast<size_t>(k)];
          slash_blocks[static_cast<size_t>(k / B)] += slash[static_cast<size_t>(k)];
        }
        // The pooled estimate of the same distribution: mean last query . mean keys of each block.
        RowMeans mean_q(qs, g, T - last, T, D);
        std::vector<float> est(static_cast<size_t>(NQB));
        for (int64_t j = 0; j < NQB; ++j)
          est[static_cast<size_t>(j)] =
              c.scale * dot(mean_q.at(j * B).data(), mean_k[static_cast<size_t>(j)].data(), D);
        softmax(est.data(), NQB);
        const bool query_aware = js_distance(std::vector<double>(est.begin(), est.end()), vertical_blocks) < p.tau;

        int64_t num_vertical = budget_blocks, num_slash = budget_blocks;
        if (!query_aware) {
          num_vertical = std::clamp(cover_count(vertical, p.gamma) / B + 1, budget_blocks, NQB);
          num_slash = std::clamp(cover_count(slash, p.gamma) / B + 1, budget_blocks, NQB);
        }
        const std::vector<int32_t> vs = top_blocks(vertical_blocks, num_vertical, 0);
        const std::vector<int32_t> ss = top_blocks(slash_blocks, num_slash, 0);
        for (int64_t i = first; i < NQB; ++i) {
          for (int32_t v : vs)
            if (v <= i) sets.add_block(h, i, v);
          for (int32_t s : ss)
            if (s <= i) sets.add_block(h, i, i - s);
        }
        if (!query_aware) continue;
        // Query-aware: every (query block, key block <= it) pair of the chunk, by its pooled score.
        std::vector<double> mass;
        std::vector<std::pair<int64_t, int64_t>> pairs;
        for (int64_t i = first; i < NQB; ++i) {
          RowMeans qi(qs, g, c.row_begin(i) - c.start(), c.row_end(i) - c.start(), D);
          std::vector<float> s(static_cast<size_t>(i + 1));
          for (int64_t j = 0; j <= i; ++j)
            s[static_cast<size_t>(j)] = c.scale * dot(qi.at(j * B).data(), mean_k[static_cast<size_t>(j)].data(), D);
          softmax(s.data(), i + 1);
          for (int64_t j = 0; j <= i; ++j) {
            mass.push_back(s[static_cast<size_t>(j)]);
            pairs.emplace_back(i, j);
          }
        }
        for (int32_t x : cover_mass(mass, {}, p.gamma))
          sets.add_block(h, pairs[static_cast<size_t>(x)].first, pairs[static_cast<size_t>(x)].second);
      }
    }
  });
  sets.write(out.block_counts, out.block_index, out.column_counts, out.column_index);
}

}  // namespace nanovllm::cpu
