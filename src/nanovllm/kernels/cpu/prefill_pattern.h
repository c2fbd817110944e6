// What the CPU pattern estimators share: the chunk's geometry, its queries and keys in fp32, the "keep the best until a
// share of the mass is covered" rule, and the per-(KV head, query block) sets a pattern is built from. Internal to
// kernels/cpu.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/kv_cache.h"

namespace nanovllm::cpu {

// One sequence's prefill chunk: queries at positions [ctx - T, ctx) attend keys [0, ctx) causally. Pattern blocks are B
// tokens in absolute positions: query block i holds positions [iB, (i + 1) B).
struct PrefillChunk {
  int64_t T = 0, ctx = 0;         // chunk tokens, keys (prefix + chunk)
  int64_t Hq = 0, Hk = 0, D = 0;  // query heads, KV heads, head_dim
  int64_t B = 0;                  // pattern block size
  float scale = 0;                // softmax scale of q.k
  int64_t dca_chunk_len = 0;      // > 0: Dual Chunk Attention with chunks of this many positions (q in 3 rotations)
  int64_t group() const { return Hq / Hk; }
  int64_t start() const { return ctx - T; }                 // first query position
  int64_t num_blocks() const { return (ctx + B - 1) / B; }  // NQB (and key blocks)
  int64_t first_block() const { return start() / B; }       // the chunk's first query block
  // Query rows of block i inside the chunk: positions [row_begin(i), row_end(i)).
  int64_t row_begin(int64_t i) const { return i * B > start() ? i * B : start(); }
  int64_t row_end(int64_t i) const { return (i + 1) * B < ctx ? (i + 1) * B : ctx; }
  int64_t key_end(int64_t j) const { return (j + 1) * B < ctx ? (j + 1) * B : ctx; }
};

// The chunk's queries in fp32, by head: q [T, Hq, D] as [Hq][T][D]; with Dual Chunk Attention q [3, T, Hq, D] (intra,
// successive, inter) as [3][Hq][T][D], and a query row is scored against a key with the rotation of the key's region
// (dual_chunk_region), as the attention scores it.
class ChunkQueries {
 public:
  ChunkQueries(TensorView q, const PrefillChunk& c);
  // Row t of query head g as scored against the key at position k.
  const float* row(int64_t g, int64_t t, int64_t k) const;
  // The region index of row t against key k (0 without DCA).
  int region(int64_t t, int64_t k) const;

 private:
  PrefillChunk c_;
  std::vector<float> q_;
};

// Means over rows [t0, t1) of query head g as scored against a key position (row() of each row), as the pooled
// estimators use them. Without DCA one mean serves every key; with DCA the rows' rotations for a key depend on its
// region from the first and from the last row (the rows are consecutive, so at most two chunks), and each such pair's
// mean is computed once. Sums in row order, then divided by the row count, in fp32.
class RowMeans {
 public:
  RowMeans(const ChunkQueries& q, int64_t g, int64_t t0, int64_t t1, int64_t D);
  const std::vector<float>& at(int64_t k);

 private:
  const ChunkQueries& q_;
  int64_t g_, t0_, t1_, D_;
  std::array<std::vector<float>, 9> means_;  // by 3 x region(first row) + region(last row)
};

// The sequence's keys [0, ctx) read through block_table from k_cache [NB, BS, Hk, D] (either format of kv_cache.h) as
// fp32 [Hk][ctx][D]. A
// reference's simplicity over memory (so are ChunkQueries'): the CPU backend runs tiny models; the CUDA estimators read
// the cache in place.
std::vector<float> keys_by_head(const KvCacheTensor& k_cache, const int32_t* block_table, int64_t ctx);

// s . t over D elements, in fp32 (the estimators' scores; the exact attention is the kernel's).
float dot(const float* s, const float* t, int64_t D);

// Softmax of x[0, n) in place (max-subtracted, fp64 sum).
void softmax(float* x, int64_t n);

// The entries to keep of mass[0, n) (non-negative): the forced ones first, then the others by decreasing mass (ties:
// the lower index) while the mass kept so far is below threshold x the total. threshold >= 1 keeps every entry (a float
// sum may never reach the total exactly).
std::vector<int32_t> cover_mass(const std::vector<double>& mass, const std::vector<int32_t>& forced, double threshold);

// Key blocks and columns per (KV head, query block of the chunk), the sink block 0 and the diagonal block always in.
// write() fills the pattern views' rows of the chunk's query blocks: blocks increasing, columns increasing and outside
// the listed blocks; rows before the chunk stay as they are (the kernel computes no row there). With max_blocks > 0
// (kBlockBudget, estimator_params.h) write() keeps at most that many blocks per row, by the ranks rank_blocks recorded.
class PatternSets {
 public:
  explicit PatternSets(const PrefillChunk& c, int64_t max_blocks = 0);
  void add_block(int64_t h, int64_t i,
                 int64_t j);                         // key block j <= i for query block i of head h
  void add_column(int64_t h, int64_t i, int64_t p);  // key position p < iB
  void add_causal_row(int64_t h, int64_t i);         // every key block 0..i
  // One query head's masses mass[0, i] of row (h, i): each block's rank becomes the largest (as a float, the CUDA
  // estimators' precision) of the masses given so far. Only with max_blocks > 0; thread-safe across rows.
  void rank_blocks(int64_t h, int64_t i, const std::vector<double>& mass);
  // block_counts [Hk, NQB], block_index [Hk, NQB, MAXB >= NQB]; column_counts [Hk, NQB] and column_index [Hk, NQB,
  // MAXC] may be undefined when no column was added. Fails when a row's columns exceed MAXC.
  void write(TensorView block_counts, TensorView block_index, TensorView column_counts, TensorView column_index) const;

 private:
  size_t row(int64_t h, int64_t i) const;
  void limit(int64_t h, int64_t i, std::vector<int32_t>& listed) const;  // the budget's trim of one row's blocks
  PrefillChunk c_;
  int64_t max_blocks_;
  std::vector<std::vector<float>> ranks_;      // [Hk x chunk blocks][NQB] when max_blocks_ > 0
  std::vector<std::vector<uint8_t>> blocks_;   // [Hk x chunk blocks][NQB]: 1 = listed
  std::vector<std::vector<int32_t>> columns_;  // [Hk x chunk blocks]: positions, unsorted, maybe repeated
};

}  // namespace nanovllm::cpu
