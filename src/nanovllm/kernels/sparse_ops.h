// Op entry points of sparse attention, decode and prefill (the policies in sparse/ decide, these
// compute). Same rules as ops.h: each validates, then dispatches on the tensors' device (CPU reference
// kernels, CUDA kernels in kernels/cuda/sparse_decode.cu and block_sparse_prefill.cu; bf16 there).
//
// A page is one block of the paged KV cache (BS tokens): page p of a sequence holds its positions
// [p BS, (p + 1) BS) in physical block block_tables[s][p]. Shapes: S = sequences (one query token each:
// decode), Hq/Hk = query/KV heads, D = head_dim, NB/BS = cache blocks/block size, MB = block-table
// columns, K = pages a selection may hold.
//
// With Dual Chunk Attention (the overloads taking `const DualChunkParams* dca`, non-null; docs/sparse_attention.md,
// "With Dual Chunk Attention"): q holds the three rotations of dual_chunk_qkv_prologue, [3, ..., Hq, D] (intra,
// successive, inter), and a key at position j is scored with the rotation of its region for the query at p (j in
// p's chunk, the previous one, or earlier; chunks of dca->chunk_len positions), as dual_chunk_attention scores it.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

// Quest page metadata: the element-wise min and max of every key stored in a block, per KV head.
// For each token t with slot_mapping[t] = b * BS + o >= 0 (-1: skipped), in token order: o == 0 sets
// k_min[b] = k_max[b] = the token's key (a new block), o > 0 folds it in with min/max. The key is read
// back from k_cache (already stored, so in the cache's dtype: min and max are then exact values of that
// dtype, and the bound below holds without rounding). k_min, k_max [NB, Hk, D] of k_cache's dtype;
// k_cache [NB, BS, Hk, D]; slot_mapping [T] i32. Tokens of one block arrive in offset order (the
// scheduler writes a sequence's positions in order; shared prefix blocks are never rewritten).
// An fp8 cache (kv_cache.h): the keys are the dequantized rows (code x scale in f32) and k_min/k_max are F32
// (exact) or BF16, then rounded outward (k_min down, k_max up) so the bound still holds.
void quest_update_pages(TensorView k_min, TensorView k_max, const KvCacheTensor& k_cache, TensorView slot_mapping,
                        Stream s = {});

// Quest scores: per sequence s, KV head h and page p < ceil(context_lens[s] / block_size),
//   scores[s, h, p] = max over the query heads g of h's GQA group of sum_d max(q[g,d] k_min[d], q[g,d] k_max[d])
// with k_min/k_max of block block_tables[s][p]: an upper bound of q[g] . k for every key k of the page
// (each term bounds q_d k_d, as k_d lies in [k_min_d, k_max_d]). Pages past the context get -inf.
// scores [S, Hk, MP] f32 (MP >= every sequence's pages), q [S, Hq, D], block_tables [S, MB] i32, context_lens [S] i32.
void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, Stream s = {});
// DCA: q [3, S, Hq, D]; the query is at position context_lens[s] - 1, and page p's bound is the max over the regions
// its positions meet of the bound with that region's rotation (a page straddling a chunk boundary meets two).
void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, const DualChunkParams* dca, Stream s = {});

// A 4-bit copy of every key for scoring pages (the keyscore decode policy, docs/sparse_attention.md): per (slot, KV
// head) row of the cache, x its D values as f32 (an fp8 cache's dequantized), amax = max_d |x_d|,
//   scale = amax / 7 (1 when amax is 0),  code_d = clamp(round_half_even(x_d / scale), -7, 7)
// in f32 (IEEE division) on every device, stored as the nibble code_d + 8, two per byte (d even: low nibble).
// int4_keys_update quantizes the rows of the tokens with slot_mapping[t] = b BS + o >= 0 (-1: skipped) into
// codes [NB, Hk, BS, D / 2] u8 and scales [NB, Hk, BS] f32 (block-major, so one page of one head is contiguous);
// k_cache [NB, BS, Hk, D]. D must be a multiple of 32.
void int4_keys_update(TensorView codes, TensorView scales, const KvCacheTensor& k_cache, TensorView slot_mapping,
                      Stream s = {});

// Page scores from the 4-bit keys: per sequence s, KV head h and page p < ceil(context_lens[s] / block_size),
//   scores[s, h, p] = max over the query heads g of h's GQA group and the page's keys t (positions < context_lens[s])
//                     of scale_t x sum_d q[g, d] code_t[d]
// (the page's best approximate q . k), f32 sums; pages past the context get -inf. scores [S, Hk, MP] f32, q [S, Hq,
// D], codes / scales of block block_tables[s][p] as int4_keys_update wrote them. The CUDA kernel takes head_dim up to
// 256 (tensor cores; the sums' order differs from the CPU's).
void int4_key_scores(TensorView scores, TensorView q, TensorView codes, TensorView scales, TensorView block_tables,
                     TensorView context_lens, int64_t block_size, Stream s = {});

// Page selection within a budget of K pages, per sequence and KV head, from scores [S, Hk, MP] f32 (any
// policy's). With n = ceil(context_lens[s] / block_size) pages: n <= K keeps all of them; otherwise the
// first sink_pages and the last recent_pages always, then the highest-scoring other pages (ties: the
// earlier page) up to K. selected [S, Hk, K] i32 holds the chosen page indices in increasing order, -1
// after them. 1 <= recent_pages, sink_pages + recent_pages <= K.
void select_pages(TensorView selected, TensorView scores, TensorView context_lens, int64_t block_size,
                  int64_t sink_pages, int64_t recent_pages, Stream s = {});

// Decode attention over selected pages: out[s, g] = softmax(q[s, g] . k * scale) v over the keys of the
// pages selected[s, h] (h = g's KV head) lists, the last page of the context partial (positions <
// context_lens[s]). Pages are listed in increasing order, -1 ends a list; with every page listed this is
// paged_attention of a decode step, and the CPU kernel returns bit-identical values.
// out, q [S, Hq, D]; k_cache/v_cache [NB, BS, Hk, D]; block_tables [S, MB], context_lens [S],
// selected [S, Hk, K] i32; scratch: sparse_decode_scratch_ints(S, Hk, K, BS) i32 of workspace (the
// selected keys' cache rows, gathered first, and their counts; contents unspecified afterwards).
void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                             const KvCacheTensor& v_cache, TensorView block_tables, TensorView context_lens,
                             TensorView selected, float scale, TensorView scratch, Stream s = {});
// DCA: q [3, S, Hq, D]; the selected keys split into the query's three regions, each attended with its rotation,
// merged by their log-sum-exps (dual_chunk_attention's decode over the selected keys; the CPU kernels agree bit for
// bit when every page is selected).
void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                             const KvCacheTensor& v_cache, TensorView block_tables, TensorView context_lens,
                             TensorView selected, float scale, TensorView scratch, const DualChunkParams* dca,
                             Stream s = {});
// [S, Hk] lists of at most K x BS key rows, then [S, Hk] counts and S x Hk + 1 offsets.
inline int64_t sparse_decode_scratch_ints(int64_t S, int64_t Hk, int64_t K, int64_t BS) {
  return S * Hk * (K * BS + 2) + 1;
}

// A block-sparse prefill pattern (sparse/ estimators make them). Positions are cut into blocks of
// block_size tokens: query block i = positions [i bs, (i+1) bs), key block j alike. Per KV head (the union
// of its GQA group's wishes, so one CTA serves the group's heads together) and query block i: key blocks
// to attend, and optionally single key positions ("columns": MInference's vertical lines) outside them.
// NQB = ceil(ctx / bs) for the context ctx of the sequence after this chunk.
struct BlockSparsePattern {
  int64_t block_size = 128;  // tokens per query block and per key block
  TensorView block_counts;   // [Hk, NQB] i32: key blocks listed for query block i, in [0, MAXB]
  TensorView block_index;    // [Hk, NQB, MAXB] i32: key block ids, increasing, distinct, each <= i
  TensorView column_counts;  // [Hk, NQB] i32 in [0, MAXC], or undefined (no column lists)
  TensorView column_index;   // [Hk, NQB, MAXC] i32: key positions, increasing, < min((i+1) bs, ctx),
                             // none inside a key block listed for (h, i)
};

// Block-sparse causal prefill attention for ONE sequence (meta.num_seqs == 1): its T query rows are the
// positions [ctx - T, ctx) of the cache, ctx = context_lens[0], as in paged_attention. The query row at
// position p of head g (KV head h = g / (Hq / Hk)) attends, with the exact softmax over them, the keys at
// positions <= p that lie in a key block listed for (h, p / bs) or in its column list; a row with no such
// key gets zeros. With every causal block listed this is paged_attention for that sequence (the CPU
// kernels agree bit for bit). Rows of the pattern for query blocks before the chunk are ignored; the chunk
// may start mid-block. out, q [T, Hq, D]; k_cache/v_cache [NB, BS, Hk, D] through meta.block_tables.
// The lists' contents are checked on the host (CPU tensors); CUDA kernels trust them (counts are clamped
// to MAXB / MAXC) and take ctx from meta.max_context_len (host-side). CUDA: bf16, head_dim 64 / 128, the
// sm_90a wgmma prefill kernel (other GPUs / head dims: an error); any block_size, 128 fits its key tiles.
void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const BlockSparsePattern& pattern, float scale, Stream s = {});
// DCA: q [3, T, Hq, D]; a query row attends the listed keys <= p, each scored with its region's rotation, one softmax
// over them (the three regions' partial attentions merged by their log-sum-exps). With every causal block listed this
// is dual_chunk_attention for that sequence (bit for bit on the CPU). CUDA: dca->chunk_len a multiple of 128.
void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const BlockSparsePattern& pattern, float scale, const DualChunkParams* dca,
                                    Stream s = {});

}  // namespace nanovllm::ops
