// Programmatic Dependent Launch (PDL): device-side dependency control and the launch helper.
//
// Protocol every PDL-launched kernel follows (so chains of them stay correct, also inside CUDA graphs,
// where the launches become programmatic edges):
//   1. prologue: may read only data no kernel of the last two launches writes: weights, norm weights,
//      the step's metadata (uploaded by a host copy before the step's first kernel) and KV-cache
//      entries of earlier steps. It writes nothing.
//   2. pdl_wait(): griddepcontrol.wait; returns once the preceding grid has completed and its writes
//      are visible. Everything after it may read the predecessor's outputs and write anything.
//   3. pdl_trigger() right after the wait: the next kernel may now be scheduled; it stays behind its own
//      pdl_wait() until this grid completes.
// Because a kernel triggers only after its own wait, when kernel n + 1 starts kernel n - 1 has completed:
// that is what makes step 1's reads safe.
// Early trigger (the one exception): a kernel whose every possible successor reads nothing but weights
// before its own wait (a linear projection; gather_rows, which waits first) may trigger before its
// wait, so the projection's weight copies start during the kernel's own predecessor: silu_mul always,
// the rms_norm kernels (rms_norm.cu: every norm is followed by a projection) when the context's
// KernelOptions::pdl_early_norm is set. The sampler's chunk pass triggers at its start too: it is launched
// without the attribute, and the next step's input staging after it reads only its pinned host staging
// before its wait. Kernel n + 1's prologue may then run beside kernel n - 1; everything after its wait
// stays ordered (kernel n completes only after its own wait).
// Whether launches carry the attribute is the context's choice (DeviceContext::use_pdl: on by default
// on sm_90+; NANOVLLM_PDL=0 turns it off).
// Kernels launched without the attribute (cuBLASLt, memcpy nodes, devices < sm_90) simply serialise;
// the instructions are no-ops below sm_90 and without it.
#pragma once

#include <cuda_runtime.h>

#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::cuda_ops {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Prefetch [p, p + bytes) into L2 with one bulk copy-engine request (sm_90; bytes a multiple of 16,
// p 16-byte aligned). A hint: nothing waits on it. No-op below sm_90.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Asks that an SM running `kernel` keep its largest shared-memory carveout. Otherwise the driver sizes an SM's
// carveout for the kernel it runs (an SM can change it only once idle), and a PDL successor whose CTAs need more
// shared memory than is left there cannot start beside it: it waits for the SM to drain, and its prologue (the
// decode attention's first KV copies, say) no longer overlaps the predecessor.
template <typename... KArgs>
void prefer_max_shared_carveout(void (*kernel)(KArgs...)) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  static_cast<int>(cudaSharedmemCarveoutMaxShared)));
}

// kernel<<<grid, block, smem, s's stream>>>(args...), with the PDL attribute when s's context uses it.
template <typename... KArgs, typename... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, ops::Stream s, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = static_cast<cudaStream_t>(s.cuda_stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = context_of(s).use_pdl() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

}  // namespace nanovllm::cuda_ops
