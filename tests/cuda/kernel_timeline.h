// Kernel timeline for benchmarks: the GPU start and end of every kernel (graph replays included) and
// memory copy from CUPTI's activity API, so a benchmark can show where a chain of PDL-launched kernels overlaps or waits
// (nsys's importer does not run on the device machine). CUPTI is loaded at run time (dlopen; the
// library path from NANOVLLM_CUPTI_LIB, else libcupti.so.13 / libcupti.so on the loader path), so the
// test binary has no link-time dependency on it; available() is false where it cannot be loaded.
//
// Use: KernelTimeline tl; tl.start(); ...launch and synchronise...; auto ks = tl.stop();
// Records are sorted by start time; names are the demangled kernel names (template arguments dropped).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanovllm::cuda_test {

struct KernelRecord {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;  // GPU timestamps
  int grid = 0;                       // gridX * gridY * gridZ (a memcpy: its bytes)
  int dyn_smem = 0;                   // dynamic shared memory per CTA, bytes
  int device = 0;                     // CUDA device index
};

class KernelTimeline {
 public:
  // True when CUPTI loaded and its activity API is usable in this process.
  static bool available();
  // Starts recording kernel activity (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: no serialisation) and
  // memory copies ("memcpy HtoD" / "memcpy DtoH" / "memcpy").
  void start();
  // Flushes and returns what ran since start(), sorted by start time. The caller synchronises first.
  std::vector<KernelRecord> stop();
};

// Short name for a table: the function name without namespaces, template arguments and parameters.
std::string short_kernel_name(const std::string& demangled);

}  // namespace nanovllm::cuda_test
