// Causal paged attention for a mixed batch (prefill chunks with a cached prefix, and decodes).
// Work item = (query row t, KV head): the K/V rows of the cache are read once for the whole GQA group.
// The arithmetic is attend_row (attention_row.h), shared with sparse_decode_attention.
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/attention_row.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"

namespace nanovllm::cpu {

void paged_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                     const AttentionMetadata& meta, float scale) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2);
  const int64_t G = Hq / Hk;  // query heads per KV head
  const int64_t S = meta.num_seqs;
  const int64_t max_blocks = meta.block_tables.dim(1);
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();    // [S + 1]
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();   // [S]
  const int32_t* bt = meta.block_tables.data_as<const int32_t>();    // [S, max_blocks]
  std::vector<int32_t> seq_of(static_cast<size_t>(T));               // [T] row -> sequence
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);

  parallel_for(T * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* qrow = scratch_f32(buf, G * D);  // [G, D] queries, then outputs
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / Hk, kvh = item % Hk;
      const int64_t s = seq_of[static_cast<size_t>(t)];
      const int64_t p = int64_t{ctx[s]} - (int64_t{cu[s + 1]} - t);  // absolute position of row t
      const int32_t* table = bt + s * max_blocks;
      load_row_f32(q.data(), q.dtype(), (t * Hq + kvh * G) * D, G * D, qrow);
      attend_row(qrow, G, kvh, p + 1, [&](int64_t j) { return int64_t{table[j / BS]} * BS + j % BS; },
                 k_cache, v_cache, scale);  // keys 0..p
      store_row_f32(qrow, G * D, out.data(), out.dtype(), (t * Hq + kvh * G) * D);
    }
  }, 1);
}

}  // namespace nanovllm::cpu
