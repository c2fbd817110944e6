// Many small copies inside one device's memory in one launch. The offloaded decode step moves each lane's
// decode-buffer rows (K, V and their fp8 scales) in and out of the layer buffer at every layer: 8 small copies a
// lane, which as separate cudaMemcpyAsync calls cost ~2 us each of launch and gap (docs/kv_cache.md).
#pragma once

#include <cstddef>
#include <span>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

// dst[0, bytes) = src[0, bytes). A batch's destinations overlap neither each other nor any source (checked).
struct ByteCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// Every copy, in stream order after the work issued on s before it, on `dev` (CPU: memcpy; CUDA: one kernel per
// kMaxCopyBatch copies). Copies of zero bytes are skipped.
void copy_batch(std::span<const ByteCopy> copies, Device dev, Stream s = {});

}  // namespace nanovllm::ops
