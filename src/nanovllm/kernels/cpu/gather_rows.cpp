// out[i, :] = in[rows[i], :] (same dtype; rows validated by ops.cpp).
#include <cstring>

#include "nanovllm/kernels/cpu/cpu_ops.h"

namespace nanovllm::cpu {

void gather_rows(TensorView out, TensorView in, TensorView rows) {
  const int64_t S = out.dim(0);
  const size_t row_bytes = S ? out.nbytes() / static_cast<size_t>(S) : 0;
  const int32_t* r = rows.data_as<const int32_t>();  // [S]
  const char* src = in.data_as<const char>();
  char* dst = out.data_as<char>();
  for (int64_t i = 0; i < S; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + static_cast<size_t>(r[i]) * row_bytes, row_bytes);
}

}  // namespace nanovllm::cpu
