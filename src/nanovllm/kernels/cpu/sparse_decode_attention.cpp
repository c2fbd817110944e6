// Decode attention over selected pages. Like the CUDA kernel, it first gathers each (sequence, KV head)'s
// selected keys as rows of the cache viewed as [NB x BS x Hk, D] (row = slot x Hk + head), in position
// order, into the scratch; then attend_row (attention_row.h) runs over them, so a selection of every page
// equals paged_attention bit for bit. With Dual Chunk Attention the gathered keys (in position order) split
// into the query's three regions and go through dual_chunk_attend_row (dual_chunk_row.h): every page selected
// equals dual_chunk_attention's decode bit for bit.
#include <algorithm>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/attention_row.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"
#include "nanovllm/kernels/cpu/dual_chunk_row.h"

namespace nanovllm::cpu {

void sparse_decode_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                             TensorView block_tables, TensorView context_lens, TensorView selected, float scale,
                             TensorView scratch, const ops::DualChunkParams* dca) {
  const int64_t R = dca ? 3 : 1;  // query rotations: q [S, Hq, D], or [3, S, Hq, D] with DCA
  const int64_t S = q.dim(q.ndim() - 3), Hq = q.dim(q.ndim() - 2), D = q.dim(q.ndim() - 1);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2), G = Hq / Hk;
  const int64_t MB = block_tables.dim(1), K = selected.dim(2);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const int32_t* bt = block_tables.data_as<const int32_t>();
  const int32_t* sel = selected.data_as<const int32_t>();
  int32_t* rows = scratch.data_as<int32_t>();  // [S, Hk, K x BS]
  const KvCacheTensor k_rows = k_cache.rows_as_blocks();  // [NB x BS x Hk, 1, 1, D]
  const KvCacheTensor v_rows = v_cache.rows_as_blocks();
  parallel_for(S * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* qrow = scratch_f32(buf, (R + 1) * G * D);  // [R, G, D] queries (then outputs without DCA), [G, D] outputs
    float* merged = qrow + R * G * D;
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / Hk, h = item % Hk;
      const int32_t* list = sel + item * K;
      int32_t* mine = rows + item * K * BS;
      int64_t n = 0, first_succ = -1, first_intra = -1;  // DCA: where the successive and intra keys begin
      const int64_t p = int64_t{ctx[s]} - 1;                // the query's position
      const int64_t L = dca ? dca->chunk_len : 1, c = p / L;
      for (int64_t j = 0; j < K && list[j] >= 0; ++j) {
        const int64_t first = int64_t{list[j]} * BS, end = std::min<int64_t>(first + BS, ctx[s]);
        const int64_t block = bt[s * MB + list[j]];
        for (int64_t pos = first; pos < end; ++pos) {
          if (first_succ < 0 && pos >= (c - 1) * L) first_succ = n;
          if (first_intra < 0 && pos >= c * L) first_intra = n;
          mine[n++] = static_cast<int32_t>((block * BS + pos - first) * Hk + h);
        }
      }
      if (dca) {
        if (first_intra < 0) first_intra = n;
        if (first_succ < 0) first_succ = first_intra;
        const int64_t begin[3] = {first_intra, first_succ, 0};
        const int64_t count[3] = {n - first_intra, first_intra - first_succ, first_succ};
        for (int r = 0; r < 3; ++r)
          if (count[r] > 0) load_row_f32(q.data(), q.dtype(), ((r * S + s) * Hq + h * G) * D, G * D, qrow + r * G * D);
        dual_chunk_attend_row(qrow, G, 0, count, [&](int r, int64_t j) { return int64_t{mine[begin[r] + j]}; },
                              k_rows, v_rows, scale, merged);
        store_row_f32(merged, G * D, out.data(), out.dtype(), (s * Hq + h * G) * D);
        continue;
      }
      load_row_f32(q.data(), q.dtype(), (s * Hq + h * G) * D, G * D, qrow);
      attend_row(qrow, G, 0, n, [&](int64_t j) { return int64_t{mine[j]}; }, k_rows, v_rows, scale);
      store_row_f32(qrow, G * D, out.data(), out.dtype(), (s * Hq + h * G) * D);
    }
  });
}

}  // namespace nanovllm::cpu
