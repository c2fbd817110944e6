// What the card can do, measured in the same run as a benchmark, so results are reported as a fraction
// of the physical limit (METHOD.md): device-to-device copy bandwidth, pinned H2D/D2H bandwidth and the
// bf16 GEMM rate through the same cuBLASLt path the model uses.
#pragma once

#include <string>

#include "nanovllm/runner/model_runner.h"

namespace nanovllm {

struct DevicePeaks {
  std::string device_name;
  double memory_gib = 0;
  double copy_gbps = 0;     // HBM: read + write bytes per second of a large D2D copy, in GB/s
  double h2d_gbps = 0;      // pinned host -> device
  double d2h_gbps = 0;      // device -> pinned host
  double gemm_tflops = 0;   // bf16 in, fp32 accumulate, 8192^3
  bool measured = false;    // false on the CPU backend
};

// Measures on GPU 0 (about a second). Returns measured == false without CUDA.
DevicePeaks measure_device_peaks();

// Peak GPU memory allocated through nano-vLLM's CUDA allocator since start, in bytes (0 without CUDA).
size_t peak_device_memory_bytes();

}  // namespace nanovllm
