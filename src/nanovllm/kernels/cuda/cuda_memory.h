// CUDA memory: device and pinned-host allocators for Buffer, and stream-ordered copies.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"

namespace nanovllm {

// cudaMalloc/cudaFree on `device` (one allocator object per device, created on first use).
// Out of memory throws nanovllm::Error naming the request; any other CUDA failure aborts.
Allocator& cuda_allocator(int device = 0);

// Bytes currently held in cuda_allocator() allocations, and their high-water mark (all devices).
// Library workspaces taken with cudaMalloc directly (cuBLASLt, attention split-KV) are not included.
size_t cuda_allocated_bytes();
size_t cuda_peak_allocated_bytes();

// Page-locked host memory (cudaHostAlloc), needed for truly asynchronous H2D/D2H copies. device() is CPU.
Allocator& pinned_host_allocator();

// The address kernels use for pinned_host_allocator() memory (mapped: with unified addressing, the host
// pointer itself). Kernels reading or writing it cross PCIe on every access: for a few hundred bytes per
// step this replaces a copy-engine operation, whose stream hand-offs cost 4-9 us each on an H100
// (docs/experiments.md, "No copy engine around a decode step").
void* mapped_device_pointer(void* pinned_host);

// Asynchronous copies on `stream` (ordered with the kernels on it). Bytes must fit both buffers.
void copy_h2d(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_d2h(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_d2d(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// Declared in kernels/device.h: true when at least one CUDA device is usable.
bool cuda_device_available();

}  // namespace nanovllm
