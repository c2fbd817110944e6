// out[t, h, :] = cache row (slots[t], h) as floats: converted from a bf16 cache, or code x scale from an fp8 one
// (kv_fp8.cuh). Block per (token, KV head), a thread per element. Read-back of the rows a step wrote (layer taps).
#include <algorithm>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"

namespace nanovllm::cuda_ops {
namespace {

__global__ void gather_kv_rows_kernel(void* out, int out_dt, const void* cache, int cache_dt, const float* scale,
                                      const int32_t* __restrict__ slots, int hk, int D) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t row = int64_t{slots[t]} * hk + h;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const float x = scale != nullptr ? fp8_e4m3_value(static_cast<const uint8_t*>(cache)[row * D + d]) * scale[row]
                                     : load_f32(cache, cache_dt, row * D + d);
    store_f32(out, out_dt, (t * hk + h) * D + d, x);
  }
}

}  // namespace

void gather_kv_rows(TensorView out, const KvCacheTensor& cache, TensorView slots, ops::Stream s) {
  const int64_t T = out.dim(0), Hk = out.dim(1), D = out.dim(2);
  if (T == 0) return;
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(Hk));
  gather_kv_rows_kernel<<<grid, static_cast<unsigned>(std::min<int64_t>(D, 256)), 0, stream_of(s)>>>(
      out.data(), dt(out), cache.data(), dt(cache), cache.fp8() ? cache.scale.data_as<const float>() : nullptr,
      slots.data_as<const int32_t>(), static_cast<int>(Hk), static_cast<int>(D));
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
