// A grow-only device workspace per (op, device): DeviceContext::op_state keyed by the op's Tag type. It grows to the
// largest request seen (the longest context), so steady-state calls allocate nothing; growing frees the old block with
// cudaFree, which waits for the launches still reading it. Host C++ only.
#pragma once

#include <cstddef>
#include <memory>

#include <cuda_runtime.h>

#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/device_context.h"

namespace nanovllm::cuda_ops {

template <class Tag>
struct OpWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
  OpWorkspace() = default;
  ~OpWorkspace() { cudaFree(data); }
  OpWorkspace(const OpWorkspace&) = delete;
  OpWorkspace& operator=(const OpWorkspace&) = delete;
};

// At least `bytes` bytes of Tag's workspace on the device of `s` (256-byte aligned, cudaMalloc's alignment).
template <class Tag>
unsigned char* op_workspace(size_t bytes, ops::Stream s) {
  OpWorkspace<Tag>& w = context_of(s).op_state<OpWorkspace<Tag>>([] { return std::make_unique<OpWorkspace<Tag>>(); });
  if (w.bytes < bytes) {
    CUDA_CHECK(cudaFree(w.data));  // synchronises: no launch still reads the old block
    w.data = nullptr;
    CUDA_CHECK(cudaMalloc(&w.data, bytes));
    w.bytes = bytes;
  }
  return static_cast<unsigned char*>(w.data);
}

// Carves consecutive 256-byte aligned pieces out of a workspace; total() sizes it when given no base.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(unsigned char* base = nullptr) : base_(base) {}
  template <typename T>
  T* take(size_t count) {
    T* p = reinterpret_cast<T*>(base_ ? base_ + used_ : nullptr);
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t total() const { return used_; }

 private:
  unsigned char* base_;
  size_t used_ = 0;
};

}  // namespace nanovllm::cuda_ops
