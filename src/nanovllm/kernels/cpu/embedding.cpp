// out[t, :] = table[ids[t], :] (ids validated by ops.cpp).
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void embedding(TensorView out, TensorView ids, TensorView table) {
  const int64_t T = out.dim(0), H = out.dim(1);
  const int32_t* id = ids.data_as<const int32_t>();  // [T]
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* row = scratch_f32(buf, H);  // [H]
    for (int64_t t = b; t < e; ++t) {
      load_row_f32(table.data(), table.dtype(), int64_t{id[t]} * H, H, row);
      store_row_f32(row, H, out.data(), out.dtype(), t * H);
    }
  }, 16);
}

}  // namespace nanovllm::cpu
