// A yes/no answer per CUDA device computed once: the first get() for a device runs `probe(device)` (under a
// lock, so concurrent first calls probe once), later calls return the cached answer without locking.
// The kernels use it for "does this device run my sm_90a code" checks (runs_sm90a_code, below) and to raise
// a kernel's dynamic shared-memory limit once per device (once_per_current_device, below).
#pragma once

#include <array>
#include <atomic>
#include <mutex>

#include <cuda_runtime.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm::cuda_ops {

// True when `device` has compute capability 9.0 and the loaded code of `kernel` is sm_90a (binary and PTX
// version 90, not a JIT of an older target's PTX): what the wgmma kernels need.
inline bool runs_sm90a_code(int device, const void* kernel) {
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess && major == 9 && minor == 0 && attr.binaryVersion == 90 && attr.ptxVersion >= 90;
}

class PerDeviceFlag {
 public:
  static constexpr int kMaxDevices = 64;

  // Devices outside [0, kMaxDevices) answer false without probing.
  template <typename F>
  bool get(int device, F&& probe) {
    if (device < 0 || device >= kMaxDevices) return false;
    std::atomic<int>& st = state_[static_cast<size_t>(device)];
    int v = st.load(std::memory_order_acquire);
    if (v != 0) return v == 1;
    std::lock_guard<std::mutex> lock(mu_);
    v = st.load(std::memory_order_relaxed);
    if (v == 0) {
      v = probe(device) ? 1 : 2;
      st.store(v, std::memory_order_release);
    }
    return v == 1;
  }

 private:
  std::array<std::atomic<int>, kMaxDevices> state_{};  // 0 unknown, 1 yes, 2 no
  std::mutex mu_;
};

// Runs `set()` once per device, on the first call made while that device is current. For function
// attributes such as the dynamic shared-memory limit, which belong to each device's context: a process-wide
// once would leave the other tensor-parallel ranks' GPUs at the defaults (their launches then fail).
template <typename F>
void once_per_current_device(PerDeviceFlag& flag, F&& set) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  NANOVLLM_CHECK(device < PerDeviceFlag::kMaxDevices, "CUDA device index ", device, " is past ",
                 PerDeviceFlag::kMaxDevices);
  flag.get(device, [&](int) {
    set();
    return true;
  });
}

}  // namespace nanovllm::cuda_ops
