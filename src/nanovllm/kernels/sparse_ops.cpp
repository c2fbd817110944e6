// Sparse attention op entry points: validate (on the host also the index contents), then dispatch.
#include "nanovllm/kernels/sparse_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {
namespace {

// The queries' first rotation: q itself, or with Dual Chunk Attention q [3, ..., Hq, D]'s intra rotation (the other
// two have its shape), after checking the rotations and dca's chunk length.
TensorView first_rotation(std::string_view op, const TensorView& q, const DualChunkParams* dca) {
  if (dca == nullptr) return q;
  NANOVLLM_CHECK(dca->chunk_len >= 1 && dca->chunk_size >= dca->chunk_len, op, ": Dual Chunk Attention's chunk_len ",
                 dca->chunk_len, " and chunk_size ", dca->chunk_size, " must satisfy 1 <= chunk_len <= chunk_size");
  check_tensor(op, "q", q, q.device(), 4);
  NANOVLLM_CHECK(q.dim(0) == 3, op, ": q ", q.shape().str(),
                 " must be [3, rows, Hq, D] with Dual Chunk Attention (intra, successive, inter)");
  return TensorView(q.data(), q.dtype(), Shape{q.dim(1), q.dim(2), q.dim(3)}, q.device());
}

// k_min/k_max [NB, Hk, D] for k_cache [NB, BS, Hk, D]: of k_cache's dtype, or F32 / BF16 for an fp8 cache.
void check_page_minmax(std::string_view op, const TensorView& k_min, const TensorView& k_max,
                       const KvCacheTensor& k_cache, Device dev) {
  check_kv_tensor(op, "k_cache", k_cache, dev, 4);
  const Shape shape{k_cache.dim(0), k_cache.dim(2), k_cache.dim(3)};
  check_float_tensor(op, "k_min", k_min, dev, shape);
  check_float_tensor(op, "k_max", k_max, dev, shape);
  NANOVLLM_CHECK(k_max.dtype() == k_min.dtype(), op, ": k_min is ", dtype_name(k_min.dtype()), " but k_max is ",
                 dtype_name(k_max.dtype()));
  if (k_cache.fp8()) {
    NANOVLLM_CHECK(k_min.dtype() == DType::kF32 || k_min.dtype() == DType::kBF16, op,
                   ": k_min/k_max of an F8_E4M3 cache must be F32 or BF16, got ", dtype_name(k_min.dtype()));
  } else {
    NANOVLLM_CHECK(k_min.dtype() == k_cache.dtype(), op, ": k_min/k_max must have k_cache's dtype ",
                   dtype_name(k_cache.dtype()));
  }
}

// Page scores [S, Hk, pages] F32 on `dev` for S sequences of Hq query heads over Hk KV heads (a whole GQA group each).
void check_page_scores(std::string_view op, const TensorView& scores, int64_t S, int64_t Hq, int64_t Hk, Device dev) {
  NANOVLLM_CHECK(Hk > 0 && Hq % Hk == 0, op, ": query heads ", Hq, " must be a multiple of KV heads ", Hk);
  check_tensor(op, "scores", scores, dev, 3);
  NANOVLLM_CHECK(scores.dtype() == DType::kF32, op, ": scores must be F32, got ", dtype_name(scores.dtype()));
  NANOVLLM_CHECK(scores.dim(0) == S && scores.dim(1) == Hk, op, ": scores ", scores.shape().str(),
                 " must be [", S, ", ", Hk, ", pages]");
}

// On the host: every context's pages fit the scores' last dimension.
void check_scores_hold_contexts(std::string_view op, const TensorView& scores, const TensorView& context_lens,
                                int64_t block_size) {
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  for (int64_t i = 0; i < context_lens.dim(0); ++i)
    NANOVLLM_CHECK((int64_t{ctx[i]} + block_size - 1) / block_size <= scores.dim(2), op, ": context_lens[", i,
                   "] = ", ctx[i], " has more pages than scores' ", scores.dim(2));
}

// A host slot mapping's entries in [-1, slots).
void check_host_slots(std::string_view op, const TensorView& slot_mapping, int64_t slots) {
  const int32_t* sm = slot_mapping.data_as<const int32_t>();
  for (int64_t t = 0; t < slot_mapping.dim(0); ++t)
    NANOVLLM_CHECK(sm[t] >= -1 && sm[t] < slots, op, ": slot_mapping[", t, "] = ", sm[t], " is outside [-1, ",
                   slots, ")");
}

// block_tables [S, MB] and context_lens [S] i32; on the host: every context >= 1 and its pages' blocks in
// [0, num_blocks).
void check_decode_tables(std::string_view op, const TensorView& block_tables, const TensorView& context_lens,
                         int64_t S, int64_t num_blocks, int64_t BS, Device dev) {
  check_tensor(op, "block_tables", block_tables, dev, 2);
  check_i32(op, "block_tables", block_tables);
  NANOVLLM_CHECK(block_tables.dim(0) == S, op, ": block_tables has ", block_tables.dim(0), " rows for ", S,
                 " sequences");
  check_i32_tensor(op, "context_lens", context_lens, dev, {S});
  if (!dev.is_cpu()) return;
  const int64_t MB = block_tables.dim(1);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const int32_t* bt = block_tables.data_as<const int32_t>();
  for (int64_t s = 0; s < S; ++s) {
    NANOVLLM_CHECK(ctx[s] >= 1, op, ": context_lens[", s, "] = ", ctx[s], " (a decode query needs a key)");
    const int64_t pages = (int64_t{ctx[s]} + BS - 1) / BS;
    NANOVLLM_CHECK(pages <= MB, op, ": sequence ", s, " has ", pages, " pages but block_tables has ", MB,
                   " columns");
    for (int64_t p = 0; p < pages; ++p)
      NANOVLLM_CHECK(bt[s * MB + p] >= 0 && bt[s * MB + p] < num_blocks, op, ": block_tables[", s, "][", p,
                     "] = ", bt[s * MB + p], " is outside [0, ", num_blocks, ")");
  }
}


// One [Hk, NQB] count tensor and its [Hk, NQB, MAX] list of pattern; the list width MAX >= 1.
void check_pattern_lists(std::string_view op, std::string_view counts_name, const TensorView& counts,
                         std::string_view index_name, const TensorView& index, int64_t Hk, int64_t NQB, Device dev) {
  check_i32_tensor(op, counts_name, counts, dev, {Hk, NQB});
  check_tensor(op, index_name, index, dev, 3);
  check_i32(op, index_name, index);
  NANOVLLM_CHECK(index.dim(0) == Hk && index.dim(1) == NQB && index.dim(2) >= 1, op, ": ", index_name, " ",
                 index.shape().str(), " must be [", Hk, ", ", NQB, ", >= 1] (KV heads, query blocks, list width)");
}

// On the host: the lists of the query blocks the chunk touches (query rows [ctx - T, ctx)) follow the
// pattern's contract (sparse_ops.h).
void check_pattern_contents(std::string_view op, const BlockSparsePattern& pt, int64_t Hk, int64_t ctx, int64_t T) {
  const int64_t bs = pt.block_size, NQB = (ctx + bs - 1) / bs, MAXB = pt.block_index.dim(2);
  const bool columns = pt.column_counts.defined();
  const int64_t MAXC = columns ? pt.column_index.dim(2) : 0;
  const int32_t* bc = pt.block_counts.data_as<const int32_t>();
  const int32_t* bi = pt.block_index.data_as<const int32_t>();
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t i = (ctx - T) / bs; i < NQB; ++i) {
      const int64_t row = h * NQB + i;
      const int32_t n = bc[row];
      NANOVLLM_CHECK(n >= 0 && n <= MAXB, op, ": pattern.block_counts[", h, "][", i, "] = ", n,
                     " is outside [0, ", MAXB, "]");
      const int32_t* blocks = bi + row * MAXB;
      for (int32_t j = 0; j < n; ++j)
        NANOVLLM_CHECK(blocks[j] >= 0 && blocks[j] <= i && (j == 0 || blocks[j] > blocks[j - 1]), op,
                       ": pattern.block_index[", h, "][", i, "] must list distinct key blocks in increasing order "
                       "in [0, ", i, "] (causal), got ", blocks[j], " at ", j);
      if (!columns) continue;
      const int32_t nc = pt.column_counts.data_as<const int32_t>()[row];
      NANOVLLM_CHECK(nc >= 0 && nc <= MAXC, op, ": pattern.column_counts[", h, "][", i, "] = ", nc,
                     " is outside [0, ", MAXC, "]");
      const int32_t* cols = pt.column_index.data_as<const int32_t>() + row * MAXC;
      const int64_t end = std::min((i + 1) * bs, ctx);  // no row of block i sees a key at or past it
      int32_t next_block = 0;                           // walks the block list alongside the columns
      for (int32_t j = 0; j < nc; ++j) {
        NANOVLLM_CHECK(cols[j] >= 0 && cols[j] < end && (j == 0 || cols[j] > cols[j - 1]), op,
                       ": pattern.column_index[", h, "][", i, "] must list distinct key positions in increasing "
                       "order in [0, ", end, "), got ", cols[j], " at ", j);
        while (next_block < n && blocks[next_block] < cols[j] / bs) ++next_block;
        NANOVLLM_CHECK(next_block == n || blocks[next_block] != cols[j] / bs, op, ": pattern.column_index[", h,
                       "][", i, "] lists position ", cols[j], " of key block ", cols[j] / bs,
                       ", which block_index lists too (a key would count twice)");
      }
    }
}

}  // namespace

void quest_update_pages(TensorView k_min, TensorView k_max, const KvCacheTensor& k_cache, TensorView slot_mapping,
                        Stream s) {
  constexpr std::string_view op = "quest_update_pages";
  const Device dev = k_cache.device();
  check_page_minmax(op, k_min, k_max, k_cache, dev);
  check_tensor(op, "slot_mapping", slot_mapping, dev, 1);
  check_i32(op, "slot_mapping", slot_mapping);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(quest_update_pages, dev, k_min, k_max, k_cache, slot_mapping, s);
  check_host_slots(op, slot_mapping, k_cache.dim(0) * k_cache.dim(1));
  cpu::quest_update_pages(k_min, k_max, k_cache, slot_mapping);
}

void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, Stream s) {
  quest_scores(scores, q, k_min, k_max, block_tables, context_lens, block_size, nullptr, s);
}

void quest_scores(TensorView scores, TensorView q3, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, const DualChunkParams* dca, Stream s) {
  constexpr std::string_view op = "quest_scores";
  const Device dev = q3.device();
  const TensorView q = first_rotation(op, q3, dca);
  check_tensor(op, "q", q, dev, 3);
  check_float(op, "q", q);
  check_tensor(op, "k_min", k_min, dev, 3);
  check_float(op, "k_min", k_min);
  check_float_tensor(op, "k_max", k_max, dev, k_min.shape());
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2), NB = k_min.dim(0), Hk = k_min.dim(1);
  NANOVLLM_CHECK(k_min.dim(2) == D, op, ": k_min ", k_min.shape().str(), " head_dim != q head_dim ", D);
  check_page_scores(op, scores, S, Hq, Hk, dev);
  NANOVLLM_CHECK(block_size >= 1, op, ": block_size must be >= 1, got ", block_size);
  check_decode_tables(op, block_tables, context_lens, S, NB, block_size, dev);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(quest_scores, dev, scores, q3, k_min, k_max, block_tables, context_lens, block_size, dca, s);
  check_scores_hold_contexts(op, scores, context_lens, block_size);
  cpu::quest_scores(scores, q3, k_min, k_max, block_tables, context_lens, block_size, dca);
}

namespace {

// codes [NB, Hk, BS, D / 2] U8 and scales [NB, Hk, BS] F32 on `dev`, D a multiple of 32; returns D.
int64_t check_int4_keys(std::string_view op, const TensorView& codes, const TensorView& scales, Device dev) {
  check_tensor(op, "codes", codes, dev, 4);
  NANOVLLM_CHECK(codes.dtype() == DType::kU8, op, ": codes must be U8, got ", dtype_name(codes.dtype()));
  const int64_t D = codes.dim(3) * 2;
  NANOVLLM_CHECK(D > 0 && D % 32 == 0, op, ": head_dim ", D, " must be a multiple of 32");
  check_float_tensor(op, "scales", scales, dev, Shape{codes.dim(0), codes.dim(1), codes.dim(2)});
  NANOVLLM_CHECK(scales.dtype() == DType::kF32, op, ": scales must be F32, got ", dtype_name(scales.dtype()));
  return D;
}

}  // namespace

void int4_keys_update(TensorView codes, TensorView scales, const KvCacheTensor& k_cache, TensorView slot_mapping,
                      Stream s) {
  constexpr std::string_view op = "int4_keys_update";
  const Device dev = k_cache.device();
  check_kv_tensor(op, "k_cache", k_cache, dev, 4);
  const int64_t D = check_int4_keys(op, codes, scales, dev);
  NANOVLLM_CHECK(codes.dim(0) == k_cache.dim(0) && codes.dim(1) == k_cache.dim(2) && codes.dim(2) == k_cache.dim(1) &&
                     D == k_cache.dim(3),
                 op, ": codes ", codes.shape().str(), " must be [NB, Hk, BS, D / 2] of k_cache ",
                 k_cache.shape().str());
  check_tensor(op, "slot_mapping", slot_mapping, dev, 1);
  check_i32(op, "slot_mapping", slot_mapping);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(int4_keys_update, dev, codes, scales, k_cache, slot_mapping, s);
  check_host_slots(op, slot_mapping, k_cache.dim(0) * k_cache.dim(1));
  cpu::int4_keys_update(codes, scales, k_cache, slot_mapping);
}

void int4_key_scores(TensorView scores, TensorView q, TensorView codes, TensorView scales, TensorView block_tables,
                     TensorView context_lens, int64_t block_size, Stream s) {
  constexpr std::string_view op = "int4_key_scores";
  const Device dev = q.device();
  check_tensor(op, "q", q, dev, 3);
  check_float(op, "q", q);
  const int64_t D = check_int4_keys(op, codes, scales, dev);
  const int64_t S = q.dim(0), Hq = q.dim(1), NB = codes.dim(0), Hk = codes.dim(1);
  NANOVLLM_CHECK(q.dim(2) == D, op, ": codes ", codes.shape().str(), " hold head_dim ", D, ", q ", q.dim(2));
  NANOVLLM_CHECK(block_size == codes.dim(2), op, ": block_size ", block_size, " != the codes' ", codes.dim(2));
  check_page_scores(op, scores, S, Hq, Hk, dev);
  check_decode_tables(op, block_tables, context_lens, S, NB, block_size, dev);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(int4_key_scores, dev, scores, q, codes, scales, block_tables, context_lens, block_size, s);
  check_scores_hold_contexts(op, scores, context_lens, block_size);
  cpu::int4_key_scores(scores, q, codes, scales, block_tables, context_lens, block_size);
}

void select_pages(TensorView selected, TensorView scores, TensorView context_lens, int64_t block_size,
                  int64_t sink_pages, int64_t recent_pages, Stream s) {
  constexpr std::string_view op = "select_pages";
  const Device dev = scores.device();
  check_tensor(op, "scores", scores, dev, 3);
  NANOVLLM_CHECK(scores.dtype() == DType::kF32, op, ": scores must be F32, got ", dtype_name(scores.dtype()));
  const int64_t S = scores.dim(0), Hk = scores.dim(1), MP = scores.dim(2);
  check_tensor(op, "selected", selected, dev, 3);
  check_i32(op, "selected", selected);
  NANOVLLM_CHECK(selected.dim(0) == S && selected.dim(1) == Hk, op, ": selected ", selected.shape().str(),
                 " must be [", S, ", ", Hk, ", budget pages]");
  const int64_t K = selected.dim(2);
  check_i32_tensor(op, "context_lens", context_lens, dev, {S});
  NANOVLLM_CHECK(block_size >= 1, op, ": block_size must be >= 1, got ", block_size);
  NANOVLLM_CHECK(sink_pages >= 0 && recent_pages >= 1 && sink_pages + recent_pages <= K, op, ": sink_pages ",
                 sink_pages, " + recent_pages ", recent_pages, " must fit the budget of ", K,
                 " pages (recent_pages >= 1: the query's own page)");
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(select_pages, dev, selected, scores, context_lens, block_size, sink_pages, recent_pages, s);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  for (int64_t i = 0; i < S; ++i) {
    const int64_t pages = (int64_t{ctx[i]} + block_size - 1) / block_size;
    NANOVLLM_CHECK(ctx[i] >= 1 && pages <= MP, op, ": context_lens[", i, "] = ", ctx[i], " needs ", pages,
                   " pages; scores has ", MP);
  }
  cpu::select_pages(selected, scores, context_lens, block_size, sink_pages, recent_pages);
}

void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                             const KvCacheTensor& v_cache, TensorView block_tables, TensorView context_lens,
                             TensorView selected, float scale, TensorView scratch, Stream s) {
  sparse_decode_attention(out, q, k_cache, v_cache, block_tables, context_lens, selected, scale, scratch, nullptr, s);
}

void sparse_decode_attention(TensorView out, TensorView q3, const KvCacheTensor& k_cache,
                             const KvCacheTensor& v_cache, TensorView block_tables, TensorView context_lens,
                             TensorView selected, float scale, TensorView scratch, const DualChunkParams* dca,
                             Stream s) {
  constexpr std::string_view op = "sparse_decode_attention";
  const Device dev = q3.device();
  const TensorView q = first_rotation(op, q3, dca);
  check_tensor(op, "q", q, dev, 3);
  check_float(op, "q", q);
  check_float_tensor(op, "out", out, dev, q.shape());
  check_kv_pair(op, k_cache, v_cache, dev, 4);
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t NB = k_cache.dim(0), BS = k_cache.dim(1), Hk = k_cache.dim(2);
  NANOVLLM_CHECK(BS > 0 && k_cache.dim(3) == D, op, ": k_cache ", k_cache.shape().str(),
                 " does not match q head_dim ", D);
  NANOVLLM_CHECK(Hk > 0 && Hq % Hk == 0, op, ": query heads ", Hq, " must be a multiple of KV heads ", Hk);
  NANOVLLM_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  check_decode_tables(op, block_tables, context_lens, S, NB, BS, dev);
  check_tensor(op, "selected", selected, dev, 3);
  check_i32(op, "selected", selected);
  NANOVLLM_CHECK(selected.dim(0) == S && selected.dim(1) == Hk && selected.dim(2) >= 1, op, ": selected ",
                 selected.shape().str(), " must be [", S, ", ", Hk, ", pages >= 1]");
  const int64_t K = selected.dim(2);
  check_tensor(op, "scratch", scratch, dev, 1);
  check_i32(op, "scratch", scratch);
  NANOVLLM_CHECK(scratch.dim(0) >= sparse_decode_scratch_ints(S, Hk, K, BS), op, ": scratch holds ", scratch.dim(0),
                 " ints, needs ", sparse_decode_scratch_ints(S, Hk, K, BS));
  NANOVLLM_CHECK(NB * BS * Hk <= INT32_MAX, op, ": ", NB * BS * Hk, " cache rows do not fit 32-bit indices");
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(sparse_decode_attention, dev, out, q3, k_cache, v_cache, block_tables, context_lens,
                           selected, scale, scratch, dca, s);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const int32_t* sel = selected.data_as<const int32_t>();
  for (int64_t i = 0; i < S * Hk; ++i) {
    const int64_t pages = (int64_t{ctx[i / Hk]} + BS - 1) / BS;
    const int32_t* list = sel + i * K;
    NANOVLLM_CHECK(list[0] >= 0, op, ": selected[", i / Hk, "][", i % Hk, "] is empty");
    for (int64_t j = 0; j < K && list[j] >= 0; ++j)
      NANOVLLM_CHECK(list[j] < pages && (j == 0 || list[j] > list[j - 1]), op, ": selected[", i / Hk, "][",
                     i % Hk, "] must list pages in increasing order below ", pages, ", got ", list[j], " at ", j);
  }
  cpu::sparse_decode_attention(out, q3, k_cache, v_cache, block_tables, context_lens, selected, scale, scratch, dca);
}

void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const BlockSparsePattern& pattern, float scale, Stream s) {
  block_sparse_prefill_attention(out, q, k_cache, v_cache, meta, pattern, scale, nullptr, s);
}

void block_sparse_prefill_attention(TensorView out, TensorView q3, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const BlockSparsePattern& pattern, float scale, const DualChunkParams* dca,
                                    Stream s) {
  constexpr std::string_view op = "block_sparse_prefill_attention";
  const Device dev = q3.device();
  const TensorView q = first_rotation(op, q3, dca);
  check_paged_attention(op, out, q, k_cache, v_cache, meta, scale);
  NANOVLLM_CHECK(meta.num_seqs == 1, op, ": runs one sequence, got meta.num_seqs = ", meta.num_seqs);
  const int64_t T = q.dim(0), Hk = k_cache.dim(2), bs = pattern.block_size;
  NANOVLLM_CHECK(bs >= 1, op, ": pattern.block_size must be >= 1, got ", bs);
  // The host-side context (the CUDA launch is sized by it); on the host it must be context_lens[0].
  const int64_t ctx = meta.max_context_len;
  NANOVLLM_CHECK(ctx >= T && ctx <= INT32_MAX, op, ": meta.max_context_len ", ctx, " must hold the ", T,
                 " query rows (and fit 32 bits)");
  if (dev.is_cpu())
    NANOVLLM_CHECK(meta.context_lens.data_as<const int32_t>()[0] == ctx, op, ": meta.max_context_len ", ctx,
                   " != context_lens[0] ", meta.context_lens.data_as<const int32_t>()[0]);
  const int64_t NQB = (ctx + bs - 1) / bs;
  check_pattern_lists(op, "pattern.block_counts", pattern.block_counts, "pattern.block_index", pattern.block_index,
                      Hk, NQB, dev);
  if (pattern.column_counts.defined() || pattern.column_index.defined())
    check_pattern_lists(op, "pattern.column_counts", pattern.column_counts, "pattern.column_index",
                        pattern.column_index, Hk, NQB, dev);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(block_sparse_prefill_attention, dev, out, q3, k_cache, v_cache, meta, pattern, scale, dca,
                           s);
  check_pattern_contents(op, pattern, Hk, ctx, T);
  cpu::block_sparse_prefill_attention(out, q3, k_cache, v_cache, meta, pattern, scale, dca);
}

}  // namespace nanovllm::ops
