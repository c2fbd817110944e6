// sm_90 shared-memory barriers (mbarrier) and bulk copies global -> shared (cp.async.bulk, the TMA
// engine's 1D form): one thread asks for up to ~1 MB with one instruction and the barrier counts the
// bytes as they land, so a CTA can keep a deep ring of loads in flight without registers.
// Below sm_90 these are empty; callers must not launch kernels using them there.
#pragma once

#include <cstdint>

#include "nanovllm/kernels/cuda/mma_utils.cuh"  // smem_u32

namespace nanovllm::cuda_ops {

// One-time init by one thread, then fence + __syncthreads before any other thread uses the barrier.
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
#endif
}
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Arrive and add `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
#endif
}

// Blocks until the phase with this parity (0, 1, 0, ... for phases 0, 1, 2, ...) has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t a = smem_u32(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  }
#endif
}

// Orders this thread's view of shared memory (including what an mbarrier wait made visible) before its
// later async-proxy (bulk copy) accesses: the write-after-read edge of a refilled ring stage.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory and
// counts them on `bar`'s transaction count when they have landed.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#endif
}

}  // namespace nanovllm::cuda_ops
