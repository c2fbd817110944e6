// ops::copy_to_host on CUDA (kernels/host_copy.h): a stream-ordered D2H copy, then a wait for the stream.
#include <cuda_runtime.h>

#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/copy_to_host.h"

namespace nanovllm::cuda_ops {

void copy_to_host(void* dst, TensorView x, ops::Stream s) {
  if (x.nbytes() == 0) return;
  const cudaStream_t st = static_cast<cudaStream_t>(s.cuda_stream);
  CUDA_CHECK(cudaMemcpyAsync(dst, x.data(), x.nbytes(), cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace nanovllm::cuda_ops
