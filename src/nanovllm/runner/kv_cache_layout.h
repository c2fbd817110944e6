// The paged KV cache of every layer in one allocation, in either format of kernels/kv_cache.h: per layer a K
// region and a V region, each [NB, BS, Hk, D] elements and (fp8) their [NB, BS, Hk] f32 scales.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/model/decoder.h"

namespace nanovllm {

struct PagedKvLayout {
  int64_t layers = 0, blocks = 0, block_size = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::kF32;  // the cache's elements (F8E4M3: codes + scales)

  // One block over every layer, K and V, scales included: what the memory budget divides by.
  int64_t bytes_per_block() const {
    return layers * 2 * block_size * kv_heads * kv_cache_row_bytes(dtype, head_dim);
  }
  size_t region_bytes() const { return kv_cache_region_bytes(dtype, blocks * block_size * kv_heads, head_dim); }
  size_t total_bytes() const { return static_cast<size_t>(layers) * 2 * region_bytes(); }

  // The layers' caches in `base` (total_bytes() on `dev`).
  std::vector<LayerKvCache> carve(void* base, Device dev) const {
    std::vector<LayerKvCache> kv;
    const Shape shape{blocks, block_size, kv_heads, head_dim};
    char* p = static_cast<char*>(base);
    for (int64_t l = 0; l < layers; ++l, p += 2 * region_bytes())
      kv.push_back({kv_cache_region(p, dtype, shape, dev), kv_cache_region(p + region_bytes(), dtype, shape, dev)});
    return kv;
  }
};

}  // namespace nanovllm
