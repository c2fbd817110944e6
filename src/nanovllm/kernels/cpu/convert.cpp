// out = x in out's dtype, element-wise with round-to-nearest-even.
#include <algorithm>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void convert(TensorView out, TensorView x) {
  constexpr int64_t kChunk = 4096;
  const int64_t n = x.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* tmp = scratch_f32(buf, kChunk);  // [kChunk]
    for (int64_t c = b; c < e; ++c) {
      const int64_t first = c * kChunk;
      const int64_t len = std::min(kChunk, n - first);
      load_row_f32(x.data(), x.dtype(), first, len, tmp);
      store_row_f32(tmp, len, out.data(), out.dtype(), first);
    }
  }, 16);
}

}  // namespace nanovllm::cpu
