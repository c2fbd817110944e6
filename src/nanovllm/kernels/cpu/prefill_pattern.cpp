#include "nanovllm/kernels/cpu/prefill_pattern.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cpu/dual_chunk_row.h"
#include "nanovllm/kernels/cpu/kv_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

ChunkQueries::ChunkQueries(TensorView q, const PrefillChunk& c) : c_(c) {
  const int64_t R = c.dca_chunk_len > 0 ? 3 : 1, T = c.T, Hq = c.Hq, D = c.D;
  q_.resize(static_cast<size_t>(R * Hq * T * D));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t g = 0; g < Hq; ++g)
        load_row_f32(q.data(), q.dtype(), ((r * T + t) * Hq + g) * D, D,
                     &q_[static_cast<size_t>(((r * Hq + g) * T + t) * D)]);
}

int ChunkQueries::region(int64_t t, int64_t k) const {
  return c_.dca_chunk_len > 0 ? dual_chunk_region(c_.start() + t, k, c_.dca_chunk_len) : 0;
}

const float* ChunkQueries::row(int64_t g, int64_t t, int64_t k) const {
  return &q_[static_cast<size_t>(((region(t, k) * c_.Hq + g) * c_.T + t) * c_.D)];
}

RowMeans::RowMeans(const ChunkQueries& q, int64_t g, int64_t t0, int64_t t1, int64_t D)
    : q_(q), g_(g), t0_(t0), t1_(t1), D_(D) {}

const std::vector<float>& RowMeans::at(int64_t k) {
  std::vector<float>& m = means_[static_cast<size_t>(3 * q_.region(t0_, k) + q_.region(t1_ - 1, k))];
  if (!m.empty()) return m;
  m.assign(static_cast<size_t>(D_), 0.0f);
  for (int64_t t = t0_; t < t1_; ++t) {
    const float* x = q_.row(g_, t, k);
    for (int64_t d = 0; d < D_; ++d) m[static_cast<size_t>(d)] += x[d];
  }
  for (float& v : m) v /= static_cast<float>(t1_ - t0_);
  return m;
}

std::vector<float> keys_by_head(const KvCacheTensor& k_cache, const int32_t* block_table, int64_t ctx) {
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2), D = k_cache.dim(3);
  std::vector<float> out(static_cast<size_t>(Hk * ctx * D));
  for (int64_t p = 0; p < ctx; ++p) {
    const int64_t slot = int64_t{block_table[p / BS]} * BS + p % BS;
    for (int64_t h = 0; h < Hk; ++h)
      load_kv_row(k_cache, slot * Hk + h, &out[static_cast<size_t>((h * ctx + p) * D)]);
  }
  return out;
}

float dot(const float* s, const float* t, int64_t D) {
  float acc = 0;
  for (int64_t d = 0; d < D; ++d) acc += s[d] * t[d];
  return acc;
}

void softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / sum);
}

std::vector<int32_t> cover_mass(const std::vector<double>& mass, const std::vector<int32_t>& forced, double threshold) {
  const auto n = static_cast<int32_t>(mass.size());
  std::vector<int32_t> keep;
  if (threshold >= 1) {
    keep.resize(mass.size());
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  std::vector<uint8_t> taken(mass.size(), 0);
  double kept = 0;
  for (int32_t f : forced) {
    if (taken[static_cast<size_t>(f)]) continue;
    taken[static_cast<size_t>(f)] = 1;
    keep.push_back(f);
    kept += mass[static_cast<size_t>(f)];
  }
  std::vector<int32_t> rest;
  for (int32_t j = 0; j < n; ++j)
    if (!taken[static_cast<size_t>(j)]) rest.push_back(j);
  std::sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) {
    return mass[static_cast<size_t>(a)] > mass[static_cast<size_t>(b)] ||
           (mass[static_cast<size_t>(a)] == mass[static_cast<size_t>(b)] && a < b);
  });
  const double need = threshold * std::accumulate(mass.begin(), mass.end(), 0.0);
  for (int32_t j : rest) {
    if (kept >= need) break;
    keep.push_back(j);
    kept += mass[static_cast<size_t>(j)];
  }
  return keep;
}

PatternSets::PatternSets(const PrefillChunk& c, int64_t max_blocks) : c_(c), max_blocks_(max_blocks) {
  const auto rows = static_cast<size_t>(c.Hk * (c.num_blocks() - c.first_block()));
  blocks_.assign(rows, std::vector<uint8_t>(static_cast<size_t>(c.num_blocks()), 0));
  if (max_blocks > 0) ranks_.assign(rows, std::vector<float>(static_cast<size_t>(c.num_blocks()), 0.0f));
  columns_.resize(rows);
  for (int64_t h = 0; h < c.Hk; ++h)
    for (int64_t i = c.first_block(); i < c.num_blocks(); ++i) {
      add_block(h, i, 0);
      add_block(h, i, i);
    }
}

size_t PatternSets::row(int64_t h, int64_t i) const {
  NANOVLLM_ASSERT(h >= 0 && h < c_.Hk && i >= c_.first_block() && i < c_.num_blocks());
  return static_cast<size_t>(h * (c_.num_blocks() - c_.first_block()) + i - c_.first_block());
}

void PatternSets::add_block(int64_t h, int64_t i, int64_t j) {
  NANOVLLM_ASSERT(j >= 0 && j <= i);
  blocks_[row(h, i)][static_cast<size_t>(j)] = 1;
}

void PatternSets::add_column(int64_t h, int64_t i, int64_t p) {
  NANOVLLM_ASSERT(p >= 0 && p < i * c_.B);
  columns_[row(h, i)].push_back(static_cast<int32_t>(p));
}

void PatternSets::add_causal_row(int64_t h, int64_t i) {
  std::fill(blocks_[row(h, i)].begin(), blocks_[row(h, i)].begin() + i + 1, uint8_t{1});
}

void PatternSets::rank_blocks(int64_t h, int64_t i, const std::vector<double>& mass) {
  if (max_blocks_ <= 0) return;
  std::vector<float>& r = ranks_[row(h, i)];
  for (int64_t j = 0; j <= i && j < static_cast<int64_t>(mass.size()); ++j)
    r[static_cast<size_t>(j)] = std::max(r[static_cast<size_t>(j)], static_cast<float>(mass[static_cast<size_t>(j)]));
}

void PatternSets::limit(int64_t h, int64_t i, std::vector<int32_t>& listed) const {
  if (max_blocks_ <= 0 || static_cast<int64_t>(listed.size()) <= max_blocks_) return;
  const std::vector<float>& rank = ranks_[row(h, i)];
  std::vector<int32_t> others;  // listed blocks besides the sink and the diagonal
  for (int32_t j : listed)
    if (j != 0 && j != i) others.push_back(j);
  std::stable_sort(others.begin(), others.end(), [&](int32_t a, int32_t b) {  // listed is increasing: ties keep a < b
    return rank[static_cast<size_t>(a)] > rank[static_cast<size_t>(b)];
  });
  others.resize(static_cast<size_t>(max_blocks_ - (i > 0 ? 2 : 1)));
  others.push_back(0);
  if (i > 0) others.push_back(static_cast<int32_t>(i));
  std::sort(others.begin(), others.end());
  listed = std::move(others);
}

void PatternSets::write(TensorView block_counts, TensorView block_index, TensorView column_counts,
                        TensorView column_index) const {
  const int64_t NQB = c_.num_blocks(), MAXB = block_index.dim(2);
  const bool has_columns = column_counts.defined();
  const int64_t MAXC = has_columns ? column_index.dim(2) : 0;
  int32_t* bc = block_counts.data_as<int32_t>();
  int32_t* bi = block_index.data_as<int32_t>();
  int32_t* cc = has_columns ? column_counts.data_as<int32_t>() : nullptr;
  int32_t* ci = has_columns ? column_index.data_as<int32_t>() : nullptr;
  std::vector<int32_t> cols, kept;
  for (int64_t h = 0; h < c_.Hk; ++h) {
    for (int64_t i = c_.first_block(); i < NQB; ++i) {
      int32_t* list = bi + (h * NQB + i) * MAXB;
      int32_t n = 0;
      cols.clear();
      const std::vector<uint8_t>& listed = blocks_[row(h, i)];
      kept.clear();
      for (int64_t j = 0; j <= i; ++j)
        if (listed[static_cast<size_t>(j)]) kept.push_back(static_cast<int32_t>(j));
      limit(h, i, kept);
      for (int32_t j : kept) list[n++] = j;
      for (int32_t p : columns_[row(h, i)])
        if (!listed[static_cast<size_t>(p / c_.B)]) cols.push_back(p);
      std::sort(cols.begin(), cols.end());
      cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
      std::fill(list + n, list + MAXB, -1);
      bc[h * NQB + i] = n;
      NANOVLLM_CHECK(has_columns || cols.empty(), "prefill pattern: columns estimated but no column lists given");
      if (!has_columns) continue;
      NANOVLLM_CHECK(static_cast<int64_t>(cols.size()) <= MAXC, "prefill pattern: query block ", i, " of KV head ", h,
                     " lists ", cols.size(), " columns; column_index holds ", MAXC);
      int32_t* clist = ci + (h * NQB + i) * MAXC;
      std::copy(cols.begin(), cols.end(), clist);
      std::fill(clist + cols.size(), clist + MAXC, -1);
      cc[h * NQB + i] = static_cast<int32_t>(cols.size());
    }
  }
}

}  // namespace nanovllm::cpu
