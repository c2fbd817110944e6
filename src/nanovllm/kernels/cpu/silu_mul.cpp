// out = silu(gate) * up with gate = gate_up[:, :I], up = gate_up[:, I:]; silu(g) = g / (1 + exp(-g)).
#include <cmath>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void silu_mul(TensorView out, TensorView gate_up) {
  const int64_t T = out.dim(0), I = out.dim(1);
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    float* gu = scratch_f32(buf, 2 * I);  // [2I]
    for (int64_t t = b; t < e; ++t) {
      load_row_f32(gate_up.data(), gate_up.dtype(), t * 2 * I, 2 * I, gu);
      for (int64_t i = 0; i < I; ++i) {
        const float g = gu[i];
        gu[i] = g / (1.0f + std::exp(-g)) * gu[I + i];
      }
      store_row_f32(gu, I, out.data(), out.dtype(), t * I);
    }
  }, 8);
}

}  // namespace nanovllm::cpu
