// CUDA kernels of kernels/page_cache_ops.h (validated by the op entry points).
#pragma once

#include <cstdint>
#include <span>

#include "nanovllm/kernels/page_cache_ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void page_cache_reset(const ops::PageCacheState& state, TensorView counters, ops::Stream s);
void page_cache_store_scales(TensorView dst, TensorView src, int64_t start, ops::Stream s);
void page_cache_plan_rows(TensorView plan, TensorView selected, const ops::PageCacheState& state,
                          std::span<const ops::PageCacheRow> rows, int64_t page_size, int32_t step,
                          TensorView counters, ops::Stream s);
void page_cache_fetch_rows(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v,
                           std::span<const KvCacheTensor> host_k, std::span<const KvCacheTensor> host_v,
                           const KvCacheTensor& cache_k, const KvCacheTensor& cache_v, TensorView selected,
                           TensorView plan, std::span<const ops::PageCacheRow> rows, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif
