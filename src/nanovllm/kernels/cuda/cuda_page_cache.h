// CUDA kernels of kernels/page_cache_ops.h (validated by the op entry points).
#pragma once

#include <cstdint>

#include "nanovllm/kernels/page_cache_ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void page_cache_reset(const ops::PageCacheState& state, TensorView counters, ops::Stream s);
void page_cache_plan(TensorView plan, TensorView selected, const ops::PageCacheState& state, int64_t host_tokens,
                     int64_t page_size, int32_t step, TensorView counters, ops::Stream s);
void page_cache_fetch(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v, const KvCacheTensor& host_k,
                      const KvCacheTensor& host_v, const KvCacheTensor& cache_k, const KvCacheTensor& cache_v,
                      TensorView selected, TensorView plan, int64_t host_tokens, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif
