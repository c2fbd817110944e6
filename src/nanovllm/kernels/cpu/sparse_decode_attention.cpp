// Decode attention over selected pages: attend_row (attention_row.h) over the selected pages' keys in
// increasing position order, so a selection of every page equals paged_attention bit for bit.
#include <algorithm>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/attention_row.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"

namespace nanovllm::cpu {

void sparse_decode_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                             TensorView block_tables, TensorView context_lens, TensorView selected, float scale) {
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2), G = Hq / Hk;
  const int64_t MB = block_tables.dim(1), K = selected.dim(2);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const int32_t* bt = block_tables.data_as<const int32_t>();
  const int32_t* sel = selected.data_as<const int32_t>();
  parallel_for(S * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    thread_local std::vector<int64_t> slots;
    float* qrow = scratch_f32(buf, G * D);  // [G, D] queries, then outputs
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / Hk, h = item % Hk;
      const int32_t* list = sel + item * K;
      slots.clear();  // the selected keys' cache slots, in position order
      for (int64_t j = 0; j < K && list[j] >= 0; ++j) {
        const int64_t first = int64_t{list[j]} * BS, end = std::min<int64_t>(first + BS, ctx[s]);
        const int64_t block = bt[s * MB + list[j]];
        for (int64_t pos = first; pos < end; ++pos) slots.push_back(block * BS + pos - first);
      }
      load_row_f32(q.data(), q.dtype(), (s * Hq + h * G) * D, G * D, qrow);
      attend_row(qrow, G, h, static_cast<int64_t>(slots.size()),
                 [&](int64_t j) { return slots[static_cast<size_t>(j)]; }, k_cache, v_cache, scale);
      store_row_f32(qrow, G * D, out.data(), out.dtype(), (s * Hq + h * G) * D);
    }
  });
}

}  // namespace nanovllm::cpu
