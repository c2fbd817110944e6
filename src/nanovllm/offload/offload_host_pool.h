// The host KV pool of the offloaded sequence: for each layer one contiguous [capacity, Hk, D] region
// for K and one for V (pinned on CUDA), so one layer of the sequence moves in two large copies. An fp8 cache
// (kernels/kv_cache.h): each region also holds its rows' scales [capacity, Hk] f32 after the codes (two more
// copies per layer, ~3% of the bytes at head_dim 128). With scales_by_head (fp8 under sparse decode) each region
// also has a head-major copy of its scales, [Hk, capacity] f32 in an allocation of its own: the sparse fetch reads a
// page's scales of one KV head as one contiguous piece (whole PCIe sectors) instead of one f32 every Hk x 4 bytes.
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
  // scales_by_head (with scale_bytes only): keep the head-major copy of the scales too.
  OffloadHostPool(Allocator& host, int64_t num_layers, int64_t token_bytes, int64_t scale_bytes = 0,
                  bool scales_by_head = false);

  // Host bytes a pool of `tokens` tokens per layer holds (all layers, K and V, scales and their copies included).
  static size_t bytes_for(int64_t num_layers, int64_t token_bytes, int64_t scale_bytes, int64_t tokens,
                          bool scales_by_head = false);

  int64_t capacity() const { return capacity_; }  // tokens per layer region
  size_t bytes() const { return bytes_for(num_layers_, token_bytes_, scale_bytes_, capacity_, scales_by_head_); }

  // Reallocates to exactly `tokens` tokens per region when the pool is smaller (contents are lost).
  // The caller has synchronized every queue that could touch the old regions. Returns the seconds
  // spent allocating (0 when it already fits).
  double reserve(int64_t tokens);

  char* k(int64_t layer) const { return static_cast<char*>(k_[static_cast<size_t>(layer)].data()); }  // [cap, Hk, D]
  char* v(int64_t layer) const { return static_cast<char*>(v_[static_cast<size_t>(layer)].data()); }  // [cap, Hk, D]
  // The regions' scales [cap, Hk] f32; nullptr without scales.
  char* k_scale(int64_t layer) const { return scale_bytes_ ? k(layer) + scale_offset() : nullptr; }
  char* v_scale(int64_t layer) const { return scale_bytes_ ? v(layer) + scale_offset() : nullptr; }
  // The head-major copies [Hk, cap] f32 (written by page_cache_store_scales); nullptr without scales_by_head.
  float* k_scale_by_head(int64_t layer) const { return by_head(k_by_head_, layer); }
  float* v_scale_by_head(int64_t layer) const { return by_head(v_by_head_, layer); }

 private:
  Allocator& host_;
  int64_t num_layers_;
  int64_t token_bytes_, scale_bytes_;
  bool scales_by_head_;
  int64_t capacity_ = 0;
  size_t scale_offset() const;  // of the scales in a region: the elements, 256-byte aligned
  static float* by_head(const std::vector<Buffer>& b, int64_t layer) {
    return b.empty() ? nullptr : static_cast<float*>(b[static_cast<size_t>(layer)].data());
  }
  std::vector<Buffer> k_, v_;                  // [L] regions
  std::vector<Buffer> k_by_head_, v_by_head_;  // [L] head-major scales (scales_by_head only)
};

// The machine's available memory (MemAvailable of /proc/meminfo) in bytes; -1 when unknown.
int64_t available_host_memory_bytes();

}  // namespace nanovllm
