// Dual Chunk Attention on the CPU (kernels/dual_chunk_ops.h), computed the way vLLM's backend does
// (DualChunkFlashAttentionImpl._dual_chunk_flash_attn_prefill_func / _dual_chunk_flash_attn_decoding): per
// query row and KV head up to three partial attentions, each with its own query rotation over its own key
// range, merged by their log-sum-exps (dual_chunk_row.h, shared with the sparse kernels).
#include <algorithm>
#include <cmath>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_dual_chunk_ops.h"
#include "nanovllm/kernels/cpu/dual_chunk_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale) {
  const int64_t T = q.dim(1), Hq = q.dim(2), D = q.dim(3);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2);
  const int64_t G = Hq / Hk;  // query heads per KV head
  const int64_t S = meta.num_seqs, L = dca.chunk_len;
  const int64_t max_blocks = meta.block_tables.dim(1);
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();   // [S + 1]
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();  // [S]
  const int32_t* bt = meta.block_tables.data_as<const int32_t>();   // [S, max_blocks]
  std::vector<int32_t> seq_of(static_cast<size_t>(T));              // [T] row -> sequence
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);

  parallel_for(T * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* qrows = scratch_f32(buf, 4 * G * D);  // [3, G, D] queries, [G, D] the merged output
    float* merged = qrows + 3 * G * D;
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / Hk, kvh = item % Hk;
      const int64_t s = seq_of[static_cast<size_t>(t)];
      const int64_t p = int64_t{ctx[s]} - (int64_t{cu[s + 1]} - t);  // absolute position of row t
      const int32_t* table = bt + s * max_blocks;
      // The key ranges of the three rotations: own chunk [c L, p], previous [(c-1) L, c L), earlier [0, (c-1) L).
      const int64_t c = p / L;
      const int64_t begin[3] = {c * L, std::max<int64_t>(c - 1, 0) * L, 0};
      const int64_t end[3] = {p + 1, c * L, std::max<int64_t>(c - 1, 0) * L};
      int64_t count[3];
      for (int r = 0; r < 3; ++r) {
        count[r] = std::max<int64_t>(end[r] - begin[r], 0);
        if (count[r] > 0) load_row_f32(q.data(), q.dtype(), ((r * T + t) * Hq + kvh * G) * D, G * D, qrows + r * G * D);
      }
      dual_chunk_attend_row(qrows, G, kvh, count, [&](int r, int64_t j) {
        const int64_t pos = begin[r] + j;
        return int64_t{table[pos / BS]} * BS + pos % BS;
      }, k_cache, v_cache, scale, merged);
      store_row_f32(merged, G * D, out.data(), out.dtype(), (t * Hq + kvh * G) * D);
    }
  }, 1);
}

}  // namespace nanovllm::cpu
