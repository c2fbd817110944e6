// Block-sparse causal prefill attention for one sequence. Work item = (query block, KV head): its key
// positions (the listed blocks' positions merged with the columns, in increasing order) are collected
// once; each query row of the block then attends the prefix of them at or before its own position,
// through attend_row (attention_row.h) like paged_attention, so the full pattern — every position
// 0..p in order — gives bit-identical results. With Dual Chunk Attention the row's keys split into its
// three regions (positions increasing, so each region is a run of them) and go through
// dual_chunk_attend_row (dual_chunk_row.h) like dual_chunk_attention: the same bit-identity.
#include <algorithm>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/attention_row.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"
#include "nanovllm/kernels/cpu/dual_chunk_row.h"

namespace nanovllm::cpu {
namespace {

// The key positions query block i of KV head h attends (before the causal cut), increasing: the positions
// of its listed key blocks (clipped to the context) merged with its columns.
void collect_keys(std::vector<int32_t>& keys, const ops::BlockSparsePattern& pt, int64_t h, int64_t i,
                  int64_t NQB, int64_t ctx) {
  const int64_t bs = pt.block_size, row = h * NQB + i;
  const int64_t MAXB = pt.block_index.dim(2);
  const int32_t n_blocks = pt.block_counts.data_as<const int32_t>()[row];
  const int32_t* blocks = pt.block_index.data_as<const int32_t>() + row * MAXB;
  int32_t n_cols = 0;
  const int32_t* cols = nullptr;
  if (pt.column_counts.defined()) {
    n_cols = pt.column_counts.data_as<const int32_t>()[row];
    cols = pt.column_index.data_as<const int32_t>() + row * pt.column_index.dim(2);
  }
  keys.clear();
  int32_t c = 0;
  for (int32_t j = 0; j < n_blocks; ++j) {
    const int64_t first = int64_t{blocks[j]} * bs, end = std::min(first + bs, ctx);
    for (; c < n_cols && cols[c] < first; ++c) keys.push_back(cols[c]);
    for (int64_t pos = first; pos < end; ++pos) keys.push_back(static_cast<int32_t>(pos));
  }
  for (; c < n_cols; ++c) keys.push_back(cols[c]);
}

}  // namespace

void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const ops::BlockSparsePattern& pattern, float scale,
                                    const ops::DualChunkParams* dca) {
  const int64_t R = dca ? 3 : 1;  // query rotations: q [T, Hq, D], or [3, T, Hq, D] with DCA
  const int64_t T = q.dim(q.ndim() - 3), Hq = q.dim(q.ndim() - 2), D = q.dim(q.ndim() - 1);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2), G = Hq / Hk;
  const int64_t ctx = meta.context_lens.data_as<const int32_t>()[0];
  const int64_t bs = pattern.block_size, NQB = (ctx + bs - 1) / bs;
  const int64_t first_row_pos = ctx - T;             // position of query row 0
  const int64_t first_block = first_row_pos / bs;    // the chunk's first query block
  const int32_t* table = meta.block_tables.data_as<const int32_t>();  // [1, MB]: sequence 0's blocks
  auto slot = [&](int64_t pos) { return int64_t{table[pos / BS]} * BS + pos % BS; };
  parallel_for((NQB - first_block) * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    thread_local std::vector<int32_t> keys;
    float* qrow = scratch_f32(buf, (R + 1) * G * D);  // [R, G, D] queries (then outputs without DCA), [G, D] outputs
    float* merged = qrow + R * G * D;
    for (int64_t item = b; item < e; ++item) {
      const int64_t i = first_block + item / Hk, h = item % Hk;
      collect_keys(keys, pattern, h, i, NQB, ctx);
      const int64_t row_end = std::min((i + 1) * bs, ctx);
      for (int64_t p = std::max(i * bs, first_row_pos); p < row_end; ++p) {
        const int64_t t = p - first_row_pos;
        const int64_t n = std::upper_bound(keys.begin(), keys.end(), p) - keys.begin();  // keys <= p
        if (dca) {
          // Regions of the (increasing) keys: inter [0, (c-1) L), successive [(c-1) L, c L), intra [c L, p].
          const int64_t L = dca->chunk_len, c = p / L;
          const auto at = [&](int64_t pos) {
            return std::lower_bound(keys.begin(), keys.begin() + n, pos) - keys.begin();
          };
          const int64_t succ_begin = at((c - 1) * L), intra_begin = at(c * L);
          const int64_t first[3] = {intra_begin, succ_begin, 0};
          const int64_t count[3] = {n - intra_begin, intra_begin - succ_begin, succ_begin};
          for (int r = 0; r < 3; ++r)
            if (count[r] > 0)
              load_row_f32(q.data(), q.dtype(), ((r * T + t) * Hq + h * G) * D, G * D, qrow + r * G * D);
          dual_chunk_attend_row(qrow, G, h, count, [&](int r, int64_t j) {
            return slot(keys[static_cast<size_t>(first[r] + j)]);
          }, k_cache, v_cache, scale, merged);
          store_row_f32(merged, G * D, out.data(), out.dtype(), (t * Hq + h * G) * D);
          continue;
        }
        if (n == 0) {
          std::fill(qrow, qrow + G * D, 0.0f);
        } else {
          load_row_f32(q.data(), q.dtype(), (t * Hq + h * G) * D, G * D, qrow);
          attend_row(qrow, G, h, n, [&](int64_t j) { return slot(keys[static_cast<size_t>(j)]); }, k_cache, v_cache,
                     scale);
        }
        store_row_f32(qrow, G * D, out.data(), out.dtype(), (t * Hq + h * G) * D);
      }
    }
  }, 1);
}

}  // namespace nanovllm::cpu
