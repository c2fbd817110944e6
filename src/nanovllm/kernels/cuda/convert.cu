// out = x in out's dtype (F32/BF16/F16), round to nearest even. Used off the hot path (weight loading,
// logits), so one grid-stride kernel with the dtypes chosen at run time.
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm::cuda_ops {
namespace {

__global__ void convert_kernel(void* out, int out_dt, const void* x, int x_dt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    store_f32(out, out_dt, i, load_f32(x, x_dt, i));
}

}  // namespace

void convert(TensorView out, TensorView x, ops::Stream s) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const cudaStream_t st = stream_of(s);
  if (out.dtype() == x.dtype()) {
    CUDA_CHECK(cudaMemcpyAsync(out.data(), x.data(), x.nbytes(), cudaMemcpyDeviceToDevice, st));
    return;
  }
  const int64_t blocks = (n + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  convert_kernel<<<grid, 256, 0, st>>>(out.data(), dt(out), x.data(), dt(x), n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
