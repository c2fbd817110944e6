// The GPU hot-page cache of offloaded sparse decode (offload/offload_sparse_attention.h): per layer and KV
// head a fixed number of page slots that hold recently selected pages, so a page selected again does not
// cross PCIe. Two ops per layer and step: page_cache_plan decides which selected pages are hits and which
// slot each miss takes (serial per KV head, on the device, so the step never waits for the host);
// page_cache_fetch then moves the rows. Same rules as ops.h: validate, then dispatch (CPU reference
// kernels in kernels/cpu/page_cache.cpp, CUDA in kernels/cuda/page_cache.cu).
//
// A batched decode step runs each op once per layer for all its sequences (rows), each in its own lane: the
// *_rows ops take the lanes' states, hot-page caches and layer buffers stacked along a leading lane dimension.
//
// Shapes: Hk KV heads, K = pages one selection holds, P = pages of the layer, C = cache slots per KV head,
// ps = tokens per page, D = head_dim, N = tokens of the layer buffer. Selections are select_pages' lists
// of one sequence ([1, Hk, K] i32, pages increasing, -1 after them).
#pragma once

#include <cstdint>
#include <span>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

// One layer's cache bookkeeping (device i32). Slot c of head h holds rows cache[c, :, h, :].
struct PageCacheState {
  TensorView page_slot;   // [Hk, P]: the slot holding page p of head h, -1 none
  TensorView slot_page;   // [Hk, C]: the page slot c holds, -1 empty
  TensorView slot_stamp;  // [Hk, C]: the last step that used the slot, -1 never
  TensorView hand;        // [Hk]: the slot where the next victim search starts (a clock hand)
};

// Empties the cache: page_slot, slot_page and slot_stamp become -1, hand 0; and counters [2] i64 (see
// page_cache_plan) become 0 unless undefined.
void page_cache_reset(const PageCacheState& state, TensorView counters, Stream s = {});

// Plans the fetch of `selected` for step `step` (>= 0, increasing between resets). A page p with
// (p + 1) ps <= host_tokens lies wholly in the host pool and is cached: when a slot holds it, a hit (the
// slot's stamp becomes `step`); otherwise a miss takes the next slot, circularly from the hand, whose stamp
// is not `step` (evicting its page), so no page this step uses is evicted by it. The page straddling
// host_tokens (at most one) comes from the host uncached; pages from host_tokens on need no fetch (the
// caller's recent window). plan [1, Hk, K, 2] i32: per entry {slot or -1, 1 if the rows come from the
// host}; {-1, 0}: nothing to fetch. counters [2] i64 += {hits, misses} over the cacheable pages.
// C == 0 is no cache: every page in the host pool comes from it, counted as a miss; otherwise C >= K.
void page_cache_plan(TensorView plan, TensorView selected, const PageCacheState& state, int64_t host_tokens,
                     int64_t page_size, int32_t step, TensorView counters, Stream s = {});

// Moves the rows of every planned entry (h, k), page p = selected[0, h, k], rows r in
// [p ps, min((p + 1) ps, host_tokens)), K and V alike:
//   from the host: dst[r, h] = host[r, h], and cache[slot, r - p ps, h] = the same row when slot >= 0;
//   a hit:         dst[r, h] = cache[slot, r - p ps, h].
// dst_k/dst_v [N, Hk, D] (the layer buffer, device); host_k/host_v [>= host_tokens, Hk, D] (the host
// pool; on CUDA pinned memory the kernel reads over PCIe); cache_k/cache_v [C, ps, Hk, D] (device). All of
// one format (kv_cache.h); fp8 rows move with their scales: dst's [N, Hk], the cache's [C, ps, Hk], and the host
// pool's head-major [Hk, >= host_tokens] (a page's scales of one head contiguous; see page_cache_store_scales; on
// CUDA a pinned allocation of its own).
void page_cache_fetch(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v, const KvCacheTensor& host_k,
                      const KvCacheTensor& host_v, const KvCacheTensor& cache_k, const KvCacheTensor& cache_v,
                      TensorView selected, TensorView plan, int64_t host_tokens,
                      Stream s = {});

// The host pool's head-major scales that page_cache_fetch reads: dst[h, start + t] = src[t, h] for t < T.
// src [T, Hk] f32 (device: an fp8 layer buffer's or decode buffer's scales); dst [Hk, >= start + T] f32 host
// memory (on CUDA a pinned allocation the kernel writes over PCIe, on the stream like any kernel).
void page_cache_store_scales(TensorView dst, TensorView src, int64_t start, Stream s = {});

// One row of a batched step: the lane it uses (its state, cache and layer-buffer region) and how many of its
// tokens its host pool holds.
struct PageCacheRow {
  int64_t lane = 0;
  int64_t host_tokens = 0;
};
inline constexpr int64_t kPageCacheMaxRows = 64;  // rows of one batched call (the CUDA kernels take them by value)

// page_cache_plan for B = rows.size() sequences at once (1 <= B <= kPageCacheMaxRows, lanes distinct): row b
// plans selected[b] ([B, Hk, K] i32) into plan[b] ([B, Hk, K, 2] i32) with lane rows[b].lane's state and
// rows[b].host_tokens. state: the lanes' states stacked, page_slot [lanes, Hk, P], slot_page and slot_stamp
// [lanes, Hk, C], hand [lanes, Hk]. The counters sum over the rows.
void page_cache_plan_rows(TensorView plan, TensorView selected, const PageCacheState& state,
                          std::span<const PageCacheRow> rows, int64_t page_size, int32_t step, TensorView counters,
                          Stream s = {});

// page_cache_fetch for B = rows.size() sequences at once, codes and scales in one pass: row b moves the entries of
// selected[b] / plan[b] between host_k[b] / host_v[b] (row b's host pool, [>= rows[b].host_tokens, Hk, D], fp8
// scales [Hk, >= rows[b].host_tokens]) and
// lane rows[b].lane of dst ([lanes, N, Hk, D]) and of the cache ([lanes, C, ps, Hk, D]).
void page_cache_fetch_rows(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v,
                           std::span<const KvCacheTensor> host_k, std::span<const KvCacheTensor> host_v,
                           const KvCacheTensor& cache_k, const KvCacheTensor& cache_v, TensorView selected,
                           TensorView plan, std::span<const PageCacheRow> rows, Stream s = {});

}  // namespace nanovllm::ops
