// Work mapping of the block-sparse prefill attention (ops::block_sparse_prefill_attention), run by the
// wgmma prefill kernel (attention_prefill_wgmma.cu) with a sparse key source.
//
// Query tiles never straddle a pattern block, so one CTA follows one (KV head, query block) list: query
// block i holds tiles_per_block tiles of rows_per_tile positions from i bs, cut to the chunk [ctx - T,
// ctx) and to the block. Tiles are issued from the last (usually the most listed keys) first.
// Keys come as a stream of entries: the listed key blocks' positions (bs per block, in list order), then
// the columns; key tile t is entries [128 t, 128 t + 128). A tile may thus hold several small blocks, part
// of a block or columns; every key carries its position, and the causal mask compares positions.
#pragma once

#include <climits>

#include "nanovllm/kernels/cuda/attention_tiles.cuh"

namespace nanovllm::cuda_ops::attn {

// Device view of a pattern (sparse_ops.h) and of the chunk's position range.
struct SparsePattern {
  const int32_t* block_counts = nullptr;   // [Hk, NQB]
  const int32_t* block_index = nullptr;    // [Hk, NQB, max_blocks]
  const int32_t* column_counts = nullptr;  // [Hk, NQB]; null: no column lists
  const int32_t* column_index = nullptr;   // [Hk, NQB, max_columns]
  int max_blocks = 0, max_columns = 0;
  int num_query_blocks = 0;  // NQB = ceil(ctx / block_size)
  int block_size = 0;        // tokens per pattern block
  int ctx = 0, num_rows = 0;  // context after the chunk; query rows (positions ctx - num_rows .. ctx - 1)
  int first_block = 0;        // query block of the chunk's first row
  int rows_per_tile = 0;      // query rows per CTA tile (<= block_size)
  int tiles_per_block = 0;    // ceil(block_size / rows_per_tile)
};

// The query tile of CTA number `rev` counted from the last; false when it holds no row of the chunk
// (the first block's tiles before the chunk start).
__device__ __forceinline__ bool sparse_query_tile(const Params& p, const SparsePattern& sp, int rev, QueryTile& qt) {
  const int tiles = (sp.num_query_blocks - sp.first_block) * sp.tiles_per_block;
  const int idx = tiles - 1 - rev;
  if (idx < 0) return false;
  const int i = sp.first_block + idx / sp.tiles_per_block, sub = idx % sp.tiles_per_block;
  const int start = sp.ctx - sp.num_rows;
  const int first = max(i * sp.block_size + sub * sp.rows_per_tile, start);
  const int end = min(min(i * sp.block_size + (sub + 1) * sp.rows_per_tile, (i + 1) * sp.block_size), sp.ctx);
  if (first >= end) return false;
  qt.seq = 0;
  qt.q_begin = p.cu[0];
  qt.row0 = first - start;
  qt.rows = end - first;
  qt.pos0 = first;
  qt.last_pos = end - 1;
  qt.nkeys = end;
  return true;
}

// The key entries of one (KV head, query block): listed blocks' positions, then columns, each part
// increasing (the pattern's contract). Counts are clamped to the list widths.
struct SparseKeys {
  const int32_t* blocks = nullptr;
  const int32_t* cols = nullptr;
  int bs = 1;
  int block_entries = 0;  // listed blocks x bs
  int entries = 0;        // block_entries + columns

  SparseKeys() = default;
  __device__ __forceinline__ SparseKeys(const SparsePattern& sp, int kvh, int query_block) {
    const int64_t row = int64_t{kvh} * sp.num_query_blocks + query_block;
    const int nb = min(max(sp.block_counts[row], 0), sp.max_blocks);
    const int nc = sp.column_counts ? min(max(sp.column_counts[row], 0), sp.max_columns) : 0;
    blocks = sp.block_index + row * sp.max_blocks;
    cols = sp.column_index ? sp.column_index + row * sp.max_columns : nullptr;
    bs = sp.block_size;
    block_entries = nb * bs;
    entries = block_entries + nc;
  }
  // Position of entry e; INT_MAX past the end (a zero-filled key every row masks).
  __device__ __forceinline__ int position(int e) const {
    if (e < block_entries) return blocks[e / bs] * bs + e % bs;
    if (e < entries) return cols[e - block_entries];
    return INT_MAX;
  }
  // Smallest and largest position of key tile `tile` (of `tile_keys` entries); full: the tile has no
  // entry past the end.
  __device__ __forceinline__ void tile_range(int tile, int tile_keys, int& lo, int& hi, bool& full) const {
    const int a = tile * tile_keys, b = min(a + tile_keys, entries);
    full = b - a == tile_keys;
    lo = INT_MAX;
    hi = INT_MIN;
    if (a < block_entries) {
      lo = position(a);
      hi = position(min(b, block_entries) - 1);
    }
    if (b > block_entries) {
      lo = min(lo, position(max(a, block_entries)));
      hi = max(hi, position(b - 1));
    }
  }
};

// Dual Chunk Attention's key stream of one (KV head, query block), the block's rows all in chunk c (pattern
// blocks divide the chunk length L, which the estimators require): SparseKeys' entries regrouped by region, in
// position order — inter (keys before (c-1) L), successive ([(c-1) L, c L)), intra (from c L) — each region's
// listed blocks then its columns, and each region starting at a multiple of `tile_keys` entries (the padding reads
// as position INT_MAX, masked), so that a key tile holds one region and the kernel scores it with that region's
// query rotation (docs/sparse_attention.md, "With Dual Chunk Attention").
struct SparseKeysDca {
  const int32_t* blocks = nullptr;
  const int32_t* cols = nullptr;
  int bs = 1;
  int start[3] = {0, 0, 0};    // entry where segment s begins; s = 0 inter, 1 successive, 2 intra
  int b_first[3] = {0, 0, 0};  // the segment's blocks: blocks[b_first[s], + nb[s])
  int nb[3] = {0, 0, 0};
  int c_first[3] = {0, 0, 0};  // its columns: cols[c_first[s], + nc[s])
  int nc[3] = {0, 0, 0};
  int entries = 0;
  int query_chunk = 0;

  // First index i in [0, n) with a[i] >= x (a increasing); n when none.
  static __device__ __forceinline__ int lower_bound(const int32_t* a, int n, int x) {
    int lo = 0, hi = n;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  SparseKeysDca() = default;
  __device__ __forceinline__ SparseKeysDca(const SparsePattern& sp, int kvh, int query_block, int chunk_len,
                                           int tile_keys) {
    const int64_t row = int64_t{kvh} * sp.num_query_blocks + query_block;
    const int n_blocks = min(max(sp.block_counts[row], 0), sp.max_blocks);
    const int n_cols = sp.column_counts ? min(max(sp.column_counts[row], 0), sp.max_columns) : 0;
    blocks = sp.block_index + row * sp.max_blocks;
    cols = sp.column_index ? sp.column_index + row * sp.max_columns : nullptr;
    bs = sp.block_size;
    query_chunk = query_block * sp.block_size / chunk_len;
    // Region boundaries in positions: successive from (c-1) L, intra from c L (multiples of bs).
    const int succ_pos = (query_chunk - 1) * chunk_len, intra_pos = query_chunk * chunk_len;
    const int b_succ = succ_pos <= 0 ? 0 : lower_bound(blocks, n_blocks, succ_pos / bs);
    const int b_intra = intra_pos <= 0 ? 0 : lower_bound(blocks, n_blocks, intra_pos / bs);
    const int c_succ = succ_pos <= 0 || cols == nullptr ? 0 : lower_bound(cols, n_cols, succ_pos);
    const int c_intra = intra_pos <= 0 || cols == nullptr ? 0 : lower_bound(cols, n_cols, intra_pos);
    const int bb[4] = {0, b_succ, b_intra, n_blocks}, cb[4] = {0, c_succ, c_intra, n_cols};
    int next = 0;
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      start[s] = next;
      b_first[s] = bb[s];
      nb[s] = bb[s + 1] - bb[s];
      c_first[s] = cb[s];
      nc[s] = cb[s + 1] - cb[s];
      const int len = nb[s] * bs + nc[s];
      entries = next + len;
      next += (len + tile_keys - 1) / tile_keys * tile_keys;
    }
  }
  __device__ __forceinline__ int segment(int e) const { return e >= start[2] ? 2 : e >= start[1] ? 1 : 0; }
  // Position of offset o of segment s; INT_MAX for the padding.
  __device__ __forceinline__ int position_in(int s, int o) const {
    if (o < nb[s] * bs) return blocks[b_first[s] + o / bs] * bs + o % bs;
    if (o < nb[s] * bs + nc[s]) return cols[c_first[s] + o - nb[s] * bs];
    return INT_MAX;
  }
  __device__ __forceinline__ int position(int e) const {
    if (e >= entries) return INT_MAX;
    const int s = segment(e);
    return position_in(s, e - start[s]);
  }
  // The region (dca_region: 0 intra, 1 successive, 2 inter) of key tile `tile`.
  __device__ __forceinline__ int tile_region(int tile, int tile_keys) const { return 2 - segment(tile * tile_keys); }
  // A key chunk of that region, for the kernel's query loader (dca_region(row, chunk) of the block's rows).
  __device__ __forceinline__ int region_chunk(int region) const {
    return region == 0 ? query_chunk : region == 1 ? query_chunk - 1 : 0;
  }
  // As SparseKeys::tile_range, within the tile's segment (padding excluded; full: none).
  __device__ __forceinline__ void tile_range(int tile, int tile_keys, int& lo, int& hi, bool& full) const {
    const int a = tile * tile_keys, s = segment(a);
    const int len = nb[s] * bs + nc[s], nbe = nb[s] * bs;
    const int o0 = a - start[s], o1 = min(a + tile_keys, start[s] + len) - start[s];
    full = o1 - o0 == tile_keys;
    lo = INT_MAX;
    hi = INT_MIN;
    if (o0 < min(o1, nbe)) {
      lo = position_in(s, o0);
      hi = position_in(s, min(o1, nbe) - 1);
    }
    if (o1 > nbe && max(o0, nbe) < o1) {
      lo = min(lo, position_in(s, max(o0, nbe)));
      hi = max(hi, position_in(s, o1 - 1));
    }
  }
};

// Hopper wgmma kernel with the sparse key source (attention_prefill_wgmma.cu); false (nothing launched)
// unless head_dim is 64 / 128 and the device runs the binary's sm_90a code. p: one sequence.
// dca: Dual Chunk Attention (p.q_succ, p.q_inter, p.dca_chunk_len set; SparseKeysDca).
bool launch_block_sparse_wgmma(const Params& p, const SparsePattern& sp, int head_dim, cudaStream_t st,
                               bool dca = false);

}  // namespace nanovllm::cuda_ops::attn
