#include "nanovllm/kernels/host_copy.h"

#include <cstring>

#include "nanovllm/core/error.h"
#if NANOVLLM_WITH_CUDA
#include "nanovllm/kernels/cuda/copy_to_host.h"
#endif

namespace nanovllm::ops {

void copy_to_host(void* dst, TensorView x, Stream s) {
  NANOVLLM_CHECK(x.defined() && (dst != nullptr || x.nbytes() == 0), "copy_to_host: undefined tensor or null destination");
  if (x.device().is_cuda()) {
#if NANOVLLM_WITH_CUDA
    cuda_ops::copy_to_host(dst, x, s);
    return;
#else
    static_cast<void>(s);
    NANOVLLM_FAIL("copy_to_host: the tensor is on ", to_string(x.device()), " but nano-vLLM was built without CUDA");
#endif
  }
  if (x.nbytes() > 0) std::memcpy(dst, x.data(), x.nbytes());
}

}  // namespace nanovllm::ops
