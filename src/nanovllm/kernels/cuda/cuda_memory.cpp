#include "nanovllm/kernels/cuda/cuda_memory.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm {
namespace {

constexpr int kMaxDevices = 64;

// Bytes live in CudaAllocator allocations (all devices) and their high-water mark.
std::atomic<size_t> g_allocated{0};
std::atomic<size_t> g_peak{0};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    int prev = 0;
    CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device_) CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (prev != device_) CUDA_CHECK(cudaSetDevice(prev));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so later checks do not see it
      NANOVLLM_FAIL("CUDA out of memory allocating ", bytes, " bytes on cuda:", device_);
    }
    CUDA_CHECK(err);
    const size_t now = g_allocated.fetch_add(bytes) + bytes;
    size_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    if (p == nullptr) return;
    CUDA_CHECK(cudaFree(p));
    g_allocated.fetch_sub(bytes);
  }
  Device device() const override { return Device::cuda(device_); }

 private:
  int device_;
};

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      NANOVLLM_FAIL("out of pinned host memory allocating ", bytes, " bytes");
    }
    CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* p, size_t) override {
    if (p != nullptr) CUDA_CHECK(cudaFreeHost(p));
  }
  Device device() const override { return Device::cpu(); }
};

}  // namespace

Allocator& cuda_allocator(int device) {
  NANOVLLM_CHECK(device >= 0 && device < kMaxDevices, "cuda_allocator: bad device index ", device);
  static std::array<std::unique_ptr<CudaAllocator>, kMaxDevices> allocs;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& a = allocs[static_cast<size_t>(device)];
  if (!a) a = std::make_unique<CudaAllocator>(device);
  return *a;
}

size_t cuda_allocated_bytes() { return g_allocated.load(); }
size_t cuda_peak_allocated_bytes() { return g_peak.load(); }

Allocator& pinned_host_allocator() {
  static PinnedHostAllocator alloc;
  return alloc;
}

void* mapped_device_pointer(void* pinned_host) {
  void* dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&dev, pinned_host, 0));
  return dev;
}

void copy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}
void copy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}
void copy_d2d(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

bool cuda_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for this query
    return false;
  }
  return n > 0;
}

}  // namespace nanovllm
