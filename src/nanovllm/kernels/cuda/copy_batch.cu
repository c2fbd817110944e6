// ops::copy_batch on CUDA: up to kMaxCopies copies per launch, their pointers passed by value. Block (x, y) copies
// chunk x of copy y: 16 bytes per thread and step where the copy's pointers and size allow it, else single bytes
// (copies are small: rows of a decode buffer, their scales).
#include <algorithm>
#include <cstdint>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/copy_batch.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kMaxCopies = 128;  // 3 KB of kernel arguments
constexpr int kThreads = 256;
constexpr size_t kChunkBytes = size_t{kThreads} * 16 * 4;  // one block's share: 4 steps of 16 bytes per thread
constexpr unsigned kMaxChunks = 64;

struct CopyList {
  char* dst[kMaxCopies];
  const char* src[kMaxCopies];
  size_t bytes[kMaxCopies];
};

__global__ void __launch_bounds__(kThreads) copy_batch_kernel(const __grid_constant__ CopyList list) {
  // The sources may be the previous kernel's outputs (the qkv prologue's new token).
  pdl_wait();
  pdl_trigger();
  const int c = blockIdx.y;
  char* dst = list.dst[c];
  const char* src = list.src[c];
  const size_t bytes = list.bytes[c];
  const size_t stride = size_t{gridDim.x} * kThreads;
  const size_t first = size_t{blockIdx.x} * kThreads + threadIdx.x;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15u) == 0) {
    const size_t n = bytes / 16;
    for (size_t i = first; i < n; i += stride) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (size_t i = first; i < bytes; i += stride) dst[i] = src[i];
  }
}

}  // namespace

void copy_batch(std::span<const ops::ByteCopy> copies, ops::Stream s) {
  size_t done = 0;
  while (done < copies.size()) {
    CopyList list{};
    int n = 0;
    size_t largest = 0;
    for (; done < copies.size() && n < kMaxCopies; ++done) {
      const ops::ByteCopy& c = copies[done];
      if (c.bytes == 0) continue;
      list.dst[n] = static_cast<char*>(c.dst);
      list.src[n] = static_cast<const char*>(c.src);
      list.bytes[n] = c.bytes;
      largest = std::max(largest, c.bytes);
      ++n;
    }
    if (n == 0) break;
    const auto chunks = static_cast<unsigned>(std::min<size_t>(kMaxChunks, (largest + kChunkBytes - 1) / kChunkBytes));
    launch_pdl(copy_batch_kernel, dim3(chunks, static_cast<unsigned>(n)), dim3(kThreads), 0, s, list);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace nanovllm::cuda_ops
