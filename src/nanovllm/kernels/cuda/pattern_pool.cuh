// Block-mean pooling the CUDA pattern estimators share (AvgPool scores pooled queries against pooled keys; FlexPrefill
// the same for its query-aware heads and its Jensen-Shannon test): the mean key of every key block and the mean query
// of every query block of the chunk, in fp32, summed in position order without fused multiply-adds, so they are the CPU
// reference's mean_rows() bits (kernels/cpu). One thread per kVec elements of a row, 16-byte loads for bf16. The keys
// come from a cache of q's dtype or from an fp8 cache (codes x row scales as the CPU's load_kv_row, kv_fp8.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/kv_fp8.cuh"
#include "nanovllm/kernels/cuda/pattern_select.cuh"

namespace nanovllm::cuda_ops::pattern {

constexpr int kPoolThreads = 128;

// x[0, kVec) = p[0, kVec) as floats: one 16-byte load for 8 bf16, else element by element.
template <typename T, int kVec>
__device__ __forceinline__ void load_vec(const T* p, float (&x)[kVec]) {
  if constexpr (kVec == 8 && std::is_same_v<T, __nv_bfloat16>) {
    bf16x8_to_f32(*reinterpret_cast<const uint4*>(p), x);
  } else {
#pragma unroll
    for (int t = 0; t < kVec; ++t) x[t] = static_cast<float>(p[t]);
  }
}

// mean_k [Hk, D, nqb] fp32 (transposed: score loops read consecutive key blocks in consecutive threads): per KV head
// and key block j, the mean of keys [jB, key_end(j)) read from k_cache [NB, BS, Hk, D] through block_table, summed in
// position order (the CPU's order). blockIdx (j, slice of the [Hk x D] row); K the cache's element type (uint8_t: fp8
// codes with k_scale [NB, BS, Hk]), kVec elements per thread (vector loads where D allows).
template <typename K, int kVec>
__global__ void pool_keys_kernel(const K* __restrict__ k_cache, const float* __restrict__ k_scale,
                                 const int32_t* __restrict__ block_table, float* __restrict__ mean_k, ChunkGeometry g) {
  const int j = blockIdx.x;
  const int e = (static_cast<int>(blockIdx.y) * blockDim.x + threadIdx.x) * kVec;  // in the [Hk x D] row
  if (e >= g.Hk * g.D) return;
  const int p0 = j * g.B, p1 = g.key_end(j);
  float acc[kVec] = {};
  for (int p = p0; p < p1; ++p) {
    const int64_t slot = int64_t{block_table[p / g.BS]} * g.BS + p % g.BS;
    float x[kVec];
    load_kv_vec<K, kVec>(k_cache, k_scale, slot * g.Hk + e / g.D, g.D, e % g.D, x);
#pragma unroll
    for (int t = 0; t < kVec; ++t) acc[t] = __fadd_rn(acc[t], x[t]);
  }
  const int h = e / g.D, d = e % g.D;
#pragma unroll
  for (int t = 0; t < kVec; ++t)
    mean_k[(int64_t{h} * g.D + d + t) * g.nqb + j] = acc[t] / static_cast<float>(p1 - p0);
}

// mean_q [R, Hq, nqb - first, D] fp32: per query rotation (R = g.rotations(): Dual Chunk Attention's three), query
// head and query block i of the chunk, the mean of the chunk's rows [row_begin(i), row_end(i)) of q [R, T, Hq, D], in
// row order. blockIdx (i - first, slice of the [Hq x D] row, rotation).
template <typename T, int kVec>
__global__ void pool_queries_kernel(const T* __restrict__ q, float* __restrict__ mean_q, ChunkGeometry g) {
  q += blockIdx.z * g.rot_stride;
  mean_q += int64_t{blockIdx.z} * g.Hq * (g.nqb - g.first) * g.D;
  const int i = g.first + static_cast<int>(blockIdx.x);
  const int e = (static_cast<int>(blockIdx.y) * blockDim.x + threadIdx.x) * kVec;  // in the [Hq x D] row
  if (e >= g.Hq * g.D) return;
  const int r0 = g.row_begin(i), r1 = g.row_end(i);
  float acc[kVec] = {};
  for (int r = r0; r < r1; ++r) {
    float x[kVec];
    load_vec<T, kVec>(q + int64_t{r - g.start()} * g.Hq * g.D + e, x);
#pragma unroll
    for (int t = 0; t < kVec; ++t) acc[t] = __fadd_rn(acc[t], x[t]);
  }
  const int qh = e / g.D, d = e % g.D;
#pragma unroll
  for (int t = 0; t < kVec; ++t)
    mean_q[(int64_t{qh} * (g.nqb - g.first) + blockIdx.x) * g.D + d + t] = acc[t] / static_cast<float>(r1 - r0);
}

template <typename T, typename K, int kVec>
void launch_pooling_as(const void* q, const KvCacheTensor& k_cache, const int32_t* block_table, float* mean_q,
                       float* mean_k, const ChunkGeometry& g, cudaStream_t st) {
  const int64_t per_cta = int64_t{kPoolThreads} * kVec;
  const float* k_scale = k_cache.fp8() ? k_cache.scale.data_as<const float>() : nullptr;
  pool_keys_kernel<K, kVec><<<dim3(g.nqb, ceil_div_u(int64_t{g.Hk} * g.D, per_cta)), kPoolThreads, 0, st>>>(
      static_cast<const K*>(k_cache.data()), k_scale, block_table, mean_k, g);
  CUDA_CHECK(cudaGetLastError());
  pool_queries_kernel<T, kVec><<<dim3(g.nqb - g.first, ceil_div_u(int64_t{g.Hq} * g.D, per_cta), g.rotations()),
                                 kPoolThreads, 0, st>>>(static_cast<const T*>(q), mean_q, g);
  CUDA_CHECK(cudaGetLastError());
}

// The pooling kernels for q's and k_cache's element types (the entry points check they are floats; `op` names the
// caller in the error when they do not match).
inline void launch_pooling(const char* op, const TensorView& q, const KvCacheTensor& k_cache,
                           const int32_t* block_table, float* mean_q, float* mean_k, const ChunkGeometry& g,
                           cudaStream_t st) {
  check_query_and_cache(op, q, k_cache);
  const bool vec = g.D % 8 == 0 && aligned16(q.data()) && aligned16(k_cache.data());
  if (k_cache.fp8()) {
    if (vec) return launch_pooling_as<__nv_bfloat16, uint8_t, 8>(q.data(), k_cache, block_table, mean_q, mean_k, g, st);
    return launch_pooling_as<__nv_bfloat16, uint8_t, 1>(q.data(), k_cache, block_table, mean_q, mean_k, g, st);
  }
  if (q.dtype() == DType::kBF16) {
    if (vec) {
      return launch_pooling_as<__nv_bfloat16, __nv_bfloat16, 8>(q.data(), k_cache, block_table, mean_q, mean_k, g,
                                                                st);
    }
    return launch_pooling_as<__nv_bfloat16, __nv_bfloat16, 1>(q.data(), k_cache, block_table, mean_q, mean_k, g, st);
  }
  if (q.dtype() == DType::kF16)
    return launch_pooling_as<__half, __half, 1>(q.data(), k_cache, block_table, mean_q, mean_k, g, st);
  launch_pooling_as<float, float, 1>(q.data(), k_cache, block_table, mean_q, mean_k, g, st);
}

}  // namespace nanovllm::cuda_ops::pattern
