// out[t, :] = table[ids[t] - id_offset, :]; ids with no row in the table give zeros (a vocab-parallel
// rank's other ranks' ids). ops.cpp validates the plain embedding's ids before calling with offset 0.
#include <algorithm>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void embedding(TensorView out, TensorView ids, TensorView table, int64_t id_offset) {
  const int64_t T = out.dim(0), H = out.dim(1), rows = table.dim(0);
  const int32_t* id = ids.data_as<const int32_t>();  // [T]
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* row = scratch_f32(buf, H);  // [H]
    for (int64_t t = b; t < e; ++t) {
      const int64_t r = int64_t{id[t]} - id_offset;
      if (r >= 0 && r < rows) {
        load_row_f32(table.data(), table.dtype(), r * H, H, row);
      } else {
        std::fill(row, row + H, 0.0f);
      }
      store_row_f32(row, H, out.data(), out.dtype(), t * H);
    }
  }, 16);
}

// out [S, V] f32 <- shards [N, S, Vr] f32: column r Vr + j of row s is shards[r, s, j].
void gather_vocab_shards(TensorView out, TensorView shards) {
  const int64_t n = shards.dim(0), rows = shards.dim(1), per_rank = shards.dim(2), vocab = out.dim(1);
  const float* src = shards.data_as<const float>();
  float* dst = out.data_as<float>();
  for (int64_t r = 0; r < n; ++r) {
    // The last ranks' padding is dropped (with a toy vocabulary a rank may cover no column at all).
    const int64_t cols = std::clamp<int64_t>(vocab - r * per_rank, 0, per_rank);
    for (int64_t s = 0; s < rows; ++s)
      std::copy_n(src + (r * rows + s) * per_rank, cols, dst + s * vocab + r * per_rank);
  }
}

}  // namespace nanovllm::cpu
