// out[t] = the cache rows of slot slots[t], every KV head, as floats (kv_row.h; slots validated by ops.cpp).
#include <vector>

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/kv_row.h"

namespace nanovllm::cpu {

void gather_kv_rows(TensorView out, const KvCacheTensor& cache, TensorView slots) {
  const int64_t T = out.dim(0), Hk = out.dim(1), D = out.dim(2);
  const int32_t* slot = slots.data_as<const int32_t>();  // [T]
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hk; ++h) {
      load_kv_row(cache, int64_t{slot[t]} * Hk + h, row.data());
      store_row_f32(row.data(), D, out.data(), out.dtype(), (t * Hk + h) * D);
    }
}

}  // namespace nanovllm::cpu
