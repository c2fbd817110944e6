// PDL switch: environment default, per-device capability cache.
#include "nanovllm/kernels/cuda/pdl.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm::cuda_ops {
namespace {

std::atomic<int>& pdl_flag() {
  static std::atomic<int> flag{[] {
    const char* e = std::getenv("NANOVLLM_PDL");
    return (e != nullptr && std::strcmp(e, "0") == 0) ? 0 : 1;
  }()};
  return flag;
}

}  // namespace

bool pdl_enabled() { return pdl_flag().load(std::memory_order_relaxed) != 0; }

void set_pdl_enabled(bool on) { pdl_flag().store(on ? 1 : 0, std::memory_order_relaxed); }

int pdl_early_norm_env() {
  static const int v = [] {
    const char* e = std::getenv("NANOVLLM_PDL_EARLY_NORM");
    if (e == nullptr || *e == '\0') return -1;
    return std::strcmp(e, "0") == 0 ? 0 : 1;
  }();
  return v;
}

namespace {
std::atomic<bool>& early_norm_flag() {
  static std::atomic<bool> flag{pdl_early_norm_env() != 0};
  return flag;
}
}  // namespace

bool pdl_early_norm() { return early_norm_flag().load(std::memory_order_relaxed); }

void set_pdl_early_norm(bool on) { early_norm_flag().store(on, std::memory_order_relaxed); }

bool pdl_use_attribute() {
  if (!pdl_enabled()) return false;
  static std::array<std::atomic<int>, 64> major{};  // 0: not queried yet
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  int m = major[static_cast<size_t>(dev)].load(std::memory_order_relaxed);
  if (m == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev));
    major[static_cast<size_t>(dev)].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

}  // namespace nanovllm::cuda_ops
