// Hopper warpgroup MMA (wgmma) helpers shared by the sm_90a kernels: shared-memory matrix descriptors for
// the 128-byte-swizzle layout, the async fences, and the shared-shared MMAs of wgmma_ss.cuh.
//
// The 128-byte-swizzle layout (what TMA's CU_TENSOR_MAP_SWIZZLE_128B writes): 64-element (128-byte) rows,
// 16-byte chunk c of row r stored at chunk c ^ (r % 8), 8-row atoms of 1024 bytes, tiles 1024-byte aligned.
// A K-major operand advances 16 elements along K by adding 32 bytes to the descriptor's start address.
//
// wgmma needs the architecture-specific sm_90a target; the kernels using it compile to a trap elsewhere
// and the host launches them only where the loaded binary is sm_90a code.
#pragma once

#include <cstdint>

#include "nanovllm/kernels/cuda/wgmma_ss.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NANOVLLM_WGMMA_DEVICE 1
#endif

namespace nanovllm::cuda_ops {

// Shared-memory matrix descriptor, 128-byte swizzle. lbo / sbo in bytes (see the PTX ISA "matrix
// descriptor"): K-major operands use sbo = 1024 (8-row atoms), lbo unused; MN-major operands use
// lbo = distance between 64-column halves, sbo = 1024 (8-row groups).
__device__ __forceinline__ uint64_t wgmma_desc(unsigned saddr, unsigned lbo, unsigned sbo) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}

#ifdef NANOVLLM_WGMMA_DEVICE
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
#endif

// Keeps the compiler from moving accumulator reads / writes across the async wgmma boundary.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

}  // namespace nanovllm::cuda_ops
