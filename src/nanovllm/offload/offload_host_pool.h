// The host KV pool of the offloaded sequence: for each layer one contiguous [capacity, Hk, D] region
// for K and one for V (pinned on CUDA), so one layer of the sequence moves in two large copies. An fp8 cache
// (kernels/kv_cache.h): each region also holds its rows' scales [capacity, Hk] f32 after the codes (two more
// copies per layer, ~3% of the bytes at head_dim 128).
// Grow-only: a longer request reallocates it; the regions are allocated (and pinned) in parallel
// threads, with a progress line on a TTY.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nanovllm/core/tensor.h"

namespace nanovllm {

class OffloadHostPool {
 public:
  // token_bytes: one token of one layer's K (= of V): Hk * D * element size; scale_bytes: its scales (fp8:
  // Hk * 4, else 0).
  OffloadHostPool(Allocator& host, int64_t num_layers, int64_t token_bytes, int64_t scale_bytes = 0);

  // Host bytes a pool of `tokens` tokens per layer holds (all layers, K and V, scales included).
  static size_t bytes_for(int64_t num_layers, int64_t token_bytes, int64_t scale_bytes, int64_t tokens);

  int64_t capacity() const { return capacity_; }  // tokens per layer region
  size_t bytes() const { return bytes_for(num_layers_, token_bytes_, scale_bytes_, capacity_); }

  // Reallocates to exactly `tokens` tokens per region when the pool is smaller (contents are lost).
  // The caller has synchronized every queue that could touch the old regions. Returns the seconds
  // spent allocating (0 when it already fits).
  double reserve(int64_t tokens);

  char* k(int64_t layer) const { return static_cast<char*>(k_[static_cast<size_t>(layer)].data()); }  // [cap, Hk, D]
  char* v(int64_t layer) const { return static_cast<char*>(v_[static_cast<size_t>(layer)].data()); }  // [cap, Hk, D]
  // The regions' scales [cap, Hk] f32; nullptr without scales.
  char* k_scale(int64_t layer) const { return scale_bytes_ ? k(layer) + scale_offset() : nullptr; }
  char* v_scale(int64_t layer) const { return scale_bytes_ ? v(layer) + scale_offset() : nullptr; }

 private:
  Allocator& host_;
  int64_t num_layers_;
  int64_t token_bytes_, scale_bytes_;
  int64_t capacity_ = 0;
  size_t scale_offset() const;  // of the scales in a region: the elements, 256-byte aligned
  std::vector<Buffer> k_, v_;
};

// The machine's available memory (MemAvailable of /proc/meminfo) in bytes; -1 when unknown.
int64_t available_host_memory_bytes();

}  // namespace nanovllm
