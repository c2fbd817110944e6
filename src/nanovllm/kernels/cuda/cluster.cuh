// Thread-block clusters (sm_90): a barrier over every thread of the cluster, and loads from another
// cluster CTA's shared memory (distributed shared memory). Empty below sm_90: callers must not launch
// clustered kernels there.
#pragma once

namespace nanovllm::cuda_ops {

// Release / acquire: shared memory written before the barrier is visible to the cluster's loads after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// The address in cluster CTA `rank`'s shared memory of what `local` is in this CTA's.
__device__ __forceinline__ unsigned cluster_map(unsigned local, unsigned rank) {
  unsigned remote = local;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
#endif
  return remote;
}

// 4 / 8 bytes from cluster CTA `rank`'s shared memory at the address `local` has in this CTA.
__device__ __forceinline__ float ld_cluster_f32(unsigned local, unsigned rank) {
  float v = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_map(local, rank)) : "memory");
#endif
  return v;
}
__device__ __forceinline__ float2 ld_cluster_f32x2(unsigned local, unsigned rank) {
  float2 v = make_float2(0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y)
               : "r"(cluster_map(local, rank))
               : "memory");
#endif
  return v;
}

}  // namespace nanovllm::cuda_ops
