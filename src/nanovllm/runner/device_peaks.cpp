#include "nanovllm/runner/device_peaks.h"

namespace nanovllm {

#ifndef NANOVLLM_WITH_CUDA
DevicePeaks measure_device_peaks() { return {}; }  // the CUDA build defines these in runner/cuda
size_t peak_device_memory_bytes() { return 0; }
#endif

}  // namespace nanovllm
