// Work mapping of the prefill / mixed-batch attention kernels (attention_prefill*.cu).
//
// A CTA owns one query tile: rows [row0, row0 + rows) of one sequence (rows_per_cta per tile; a
// sequence of qlen rows has ceil(qlen / rows_per_cta) tiles), for one KV head and a chunk of gc heads of
// its GQA group. The tiles of all sequences are numbered in order; the CTA finds its (sequence, tile) on
// the device by a warp scan over cu_seqlens (no host-side metadata: graph capturable). The host sizes the
// grid for ceil(T / rows_per_cta) + S tiles, an upper bound; CTAs past the last tile exit.
//
// The packed-GQA tensor-core kernels (attention_prefill_tc.cu, attention_prefill_wgmma.cu) also pack the
// gc heads along M: item i = (query row i / gc, head g0 + i % gc), and issue tiles heaviest first.
#pragma once

#include "nanovllm/kernels/cuda/attention_common.cuh"

namespace nanovllm::cuda_ops::attn {

// Warp-wide (call from all 32 lanes of one warp): number of query tiles over all sequences.
__device__ __forceinline__ int count_query_tiles(const Params& p, int rows_per_cta, int lane) {
  int total = 0;
  for (int s0 = 0; s0 < p.num_seqs; s0 += 32) {
    const int s = s0 + lane;
    if (s < p.num_seqs) total += (p.cu[s + 1] - p.cu[s] + rows_per_cta - 1) / rows_per_cta;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  return total;
}

// Warp-wide: finds the (sequence, tile) whose running tile index is `bx` by a warp-parallel inclusive scan
// over the sequences' tile counts, 32 sequences at a time. Lane 0 writes tile_info = {sequence (-1: bx out
// of range), first query row of the tile (relative to the sequence)}.
__device__ __forceinline__ void find_query_tile(const Params& p, int rows_per_cta, int bx, int lane,
                                                int (&tile_info)[2]) {
  int base = 0, found_seq = -1, found_tile = 0;
  for (int s0 = 0; s0 < p.num_seqs && found_seq < 0 && bx >= 0; s0 += 32) {
    const int s = s0 + lane;
    const int qlen = s < p.num_seqs ? p.cu[s + 1] - p.cu[s] : 0;
    const int n = (qlen + rows_per_cta - 1) / rows_per_cta;
    int incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, base + incl > bx && n > 0);
    if (hit != 0) {
      const int src = __ffs(hit) - 1;
      const int excl = __shfl_sync(0xffffffffu, base + incl - n, src);
      found_seq = s0 + src;
      found_tile = bx - excl;
    }
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) {
    tile_info[0] = found_seq;
    tile_info[1] = found_tile * rows_per_cta;
  }
}

// Block-wide (call from all threads: it ends with a block barrier): warp 0 finds the CTA's query tile,
// number `idx` in order or, with kHeaviestFirst, number `idx` counted from the last tile. False when the
// CTA has no tile (the grid is over-provisioned); otherwise tile_info holds it for query_tile().
template <bool kHeaviestFirst>
__device__ __forceinline__ bool find_cta_tile(const Params& p, int rows_per_cta, int idx, int warp, int lane,
                                              int (&tile_info)[2]) {
  if (warp == 0) {
    const int bx = kHeaviestFirst ? count_query_tiles(p, rows_per_cta, lane) - 1 - idx : idx;
    find_query_tile(p, rows_per_cta, bx, lane, tile_info);
  }
  __syncthreads();
  return tile_info[0] >= 0;
}

// The query tile a CTA found (tile_info[0] >= 0). Query row r of the tile is token q_begin + row0 + r at
// position pos0 + r (causal with the cached prefix: position = ctx - qlen + row) and sees keys 0..pos0 + r.
struct QueryTile {
  int seq;
  int row0;      // first query row of the tile, relative to the sequence
  int q_begin;   // cu[seq]: token index of the sequence's first query row
  int rows;      // query rows in this tile (<= rows_per_cta)
  int pos0;      // position of the tile's first query row
  int last_pos;  // position of the tile's last query row
  int nkeys;     // keys any row of the tile sees: 0..nkeys - 1
};
__device__ __forceinline__ QueryTile query_tile(const Params& p, const int (&tile_info)[2], int rows_per_cta) {
  QueryTile q;
  q.seq = tile_info[0];
  q.row0 = tile_info[1];
  q.q_begin = p.cu[q.seq];
  const int q_end = p.cu[q.seq + 1];
  const int ctx = p.ctx[q.seq];
  q.rows = min(rows_per_cta, q_end - q.q_begin - q.row0);
  q.pos0 = ctx - (q_end - q.q_begin) + q.row0;
  q.last_pos = q.pos0 + q.rows - 1;
  q.nkeys = min(q.last_pos + 1, ctx);
  return q;
}

// Last key item i (query row i / gc, head i % gc of the chunk) may see; items without a query (past the
// tile's rows or the chunk's gcount heads) get the tile's last position: their output is discarded, they
// only have to stay finite.
__device__ __forceinline__ int item_key_limit(const QueryTile& qt, int i, int gc, int gcount) {
  const int r = i / gc;
  return (r < qt.rows && i % gc < gcount) ? qt.pos0 + r : qt.last_pos;
}

// ---- Packed-GQA tensor-core prefill (heaviest tiles first) ----

// blockIdx.x = rev * (Hk * gchunks) + unit, unit = kvh * gchunks + head chunk; rev counts query tiles from
// the last (heaviest: longest causal rows) one.
struct PackedUnit {
  int kvh, g0, gcount;  // KV head, first head of the chunk within the group, heads in the chunk
  int rev;
};
__device__ __forceinline__ PackedUnit packed_unit(const Params& p, int gc, int gchunks) {
  PackedUnit u;
  const int nunits = p.hk * gchunks;
  const int unit = static_cast<int>(blockIdx.x % static_cast<unsigned>(nunits));
  u.rev = static_cast<int>(blockIdx.x / static_cast<unsigned>(nunits));
  u.kvh = unit / gchunks;
  u.g0 = (unit % gchunks) * gc;
  u.gcount = min(gc, p.g - u.g0);
  return u;
}
// Row of [T, Hq] (query / output) of query row r, head gi of the chunk.
__device__ __forceinline__ int64_t packed_row(const Params& p, const QueryTile& qt, const PackedUnit& u, int r,
                                              int gi) {
  const int64_t head_base = int64_t{u.kvh} * p.g + u.g0;  // query head of the chunk's first head
  return (int64_t{qt.q_begin} + qt.row0 + r) * p.hq + head_base + gi;
}

// Host: grid of a packed kernel with `items` (M rows) per CTA.
struct PackedGrid {
  int gc;            // heads of the group packed along M
  int gchunks;       // head chunks per group
  int rows_per_cta;  // query rows per tile
  unsigned ctas;     // (ceil(T / rows_per_cta) + S) tiles x Hk x gchunks
};
inline PackedGrid packed_grid(const Params& p, int64_t num_tokens, int items) {
  PackedGrid g;
  g.gc = p.g < items ? p.g : items;
  g.gchunks = (p.g + g.gc - 1) / g.gc;
  g.rows_per_cta = items / g.gc;
  const int64_t tiles = (num_tokens + g.rows_per_cta - 1) / g.rows_per_cta + p.num_seqs;
  const int64_t ctas = tiles * p.hk * g.gchunks;
  NANOVLLM_CHECK(ctas < (int64_t{1} << 31), "paged_attention (cuda): prefill grid too large (", ctas, " CTAs)");
  g.ctas = static_cast<unsigned>(ctas);
  return g;
}

}  // namespace nanovllm::cuda_ops::attn
