// The GPU hot-page cache of offloaded sparse decode on CUDA (contracts: kernels/page_cache_ops.h).
// Both ops serve a batched decode step in one launch per layer: the grid spans the rows (sequences), each row
// indexing its lane of the stacked state, cache and layer buffer; the rows' lanes, host_tokens and host-pool
// pointers travel as a kernel argument (RowTable / FetchRows, at most kPageCacheMaxRows rows).
// - page_cache_plan: a CTA per (KV head, row). Hits first (one thread per selected page; distinct pages own
//   distinct slots, so their stamps are written without conflict), then the misses take the free slots
//   (stamp != step) in circular order from the hand: one block scan ranks the misses, a chunked block scan
//   over the slots ranks the free ones, and miss r takes free slot r. Equal to the CPU's serial loop.
// - page_cache_fetch: a thread per 16-byte chunk of a row of a planned page (and, fp8, per scale: the codes
//   and their scales in the same launch), four chunks in flight per thread. It reads the host pool through its mapped pinned pointer: on an H100 this gather moved 48-50
//   GB/s for 2048-4096-token selections of 16-64-token pages, as much as a pool laid out head-major
//   (contiguous 4 KB pieces) and 92% of one contiguous cudaMemcpyAsync; a cudaMemcpyAsync per piece moved
//   1.5-5.5 GB/s (docs/experiments.md).
#include <cub/block/block_scan.cuh>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/cuda_page_cache.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kPlanThreads = 256;
constexpr int kMaxPlanPages = 4096;  // K: the victims of one head's misses are staged in shared memory

__global__ void reset_kernel(int32_t* __restrict__ a, int64_t n, int32_t value) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    a[i] = value;
}

constexpr int kMaxRows = static_cast<int>(ops::kPageCacheMaxRows);

// The rows of a batched call, by value.
struct RowTable {
  int lane[kMaxRows];
  int64_t host_tokens[kMaxRows];
};

// Grid (Hk, B). plan [B, Hk, K, 2]; selected [B, Hk, K]; the lanes' page_slot [lanes, Hk, P], slot_page and
// stamp [lanes, Hk, C], hand [lanes, Hk]: row b uses lane rows.lane[b].
__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(int32_t* __restrict__ plan, const int32_t* __restrict__ selected, int32_t* __restrict__ page_slot,
                int32_t* __restrict__ slot_page, int32_t* __restrict__ stamp, int32_t* __restrict__ hand, int K,
                int P, int C, const RowTable rows, int page_size, int step, unsigned long long* __restrict__ counters) {
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int victim[kMaxPlanPages];
  __shared__ int hits_s;
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x, Hk = gridDim.x;
  const int64_t host_tokens = rows.host_tokens[b];
  const int64_t lh = int64_t{rows.lane[b]} * Hk + h;  // the row's lane's head h in the stacked state
  pdl_wait();  // the selection comes from the preceding kernel
  pdl_trigger();
  const int32_t* sel = selected + (int64_t{b} * Hk + h) * K;
  int32_t* out = plan + (int64_t{b} * Hk + h) * K * 2;
  int32_t* ps_row = page_slot + lh * P;
  int32_t* sp_row = slot_page + lh * C;
  int32_t* st_row = stamp + lh * C;
  if (tid == 0) hits_s = 0;
  __syncthreads();
  // Hits (and what needs no cache): entries handled by the thread that owns them in every phase.
  const auto cacheable = [&](int p) { return p >= 0 && (int64_t{p} + 1) * page_size <= host_tokens; };
  int my_hits = 0;
  for (int k = tid; k < K; k += kPlanThreads) {
    const int p = sel[k];
    int slot = -1, from_host = 0;
    if (p >= 0 && int64_t{p} * page_size < host_tokens) {
      from_host = 1;
      if (cacheable(p) && (slot = ps_row[p]) >= 0) {
        from_host = 0;
        st_row[slot] = step;
        ++my_hits;
      }
    }
    out[2 * k] = slot, out[2 * k + 1] = from_host;
  }
  if (my_hits) atomicAdd(&hits_s, my_hits);
  __syncthreads();  // the hits' stamps are written before the free slots are counted
  // Rank the free slots in circular order from the hand; free slot r becomes victim r (r < K).
  const int start = hand[lh];
  for (int base = 0, taken = 0; base < C && taken < K; base += kPlanThreads) {
    const int j = base + tid;
    const int c = j < C ? (start + j) % C : 0;
    const int is_free = j < C && st_row[c] != step;
    int rank, total;
    Scan(scan_tmp).ExclusiveSum(is_free, rank, total);
    if (is_free && taken + rank < K) victim[taken + rank] = c;
    taken += total;
    __syncthreads();  // scan_tmp is reused
  }
  // Rank the misses in list order and give miss r victim r.
  int missed = 0;
  for (int base = 0; base < K; base += kPlanThreads) {
    const int k = base + tid;
    const int p = k < K ? sel[k] : -1;
    const int is_miss = k < K && cacheable(p) && out[2 * k] < 0;
    int rank, total;
    Scan(scan_tmp).ExclusiveSum(is_miss, rank, total);
    if (is_miss && C > 0) {  // C == 0: no cache, the page comes from the host uncached
      const int c = victim[missed + rank];
      const int old = sp_row[c];
      if (old >= 0) ps_row[old] = -1;  // never a page of this step: those are hits, their slots not free
      sp_row[c] = p, ps_row[p] = c, st_row[c] = step;
      out[2 * k] = c;
    }
    missed += total;  // the same in every thread
    __syncthreads();  // scan_tmp is reused
  }
  if (tid == 0) {
    if (missed > 0 && C > 0) hand[lh] = (victim[missed - 1] + 1) % C;
    atomicAdd(&counters[0], static_cast<unsigned long long>(hits_s));
    atomicAdd(&counters[1], static_cast<unsigned long long>(missed));
  }
}

constexpr int kFetchThreads = 256;
constexpr int kFetchUnroll = 4;

// The rows of a batched fetch, by value: RowTable's and each row's host pool (mapped device pointers): codes
// [>= host_tokens, Hk, chunks] uint4, scales head-major [Hk, scale_cap] f32 (fp8 only).
struct FetchRows {
  RowTable row;
  int64_t scale_cap[kMaxRows];
  const uint4* host_k[kMaxRows];
  const uint4* host_v[kMaxRows];
  const float* host_k_scale[kMaxRows];
  const float* host_v_scale[kMaxRows];
};
static_assert(sizeof(FetchRows) + 256 <= 4096, "kernel arguments are limited to 4 KB");

// The layer buffer's and the cache's codes (uint4 chunks) and scales (f32, nullptr unless fp8), K and V.
struct FetchBuffers {
  uint4 *dst_k, *dst_v, *cache_k, *cache_v;
  float *dst_k_scale, *dst_v_scale, *cache_k_scale, *cache_v_scale;
};

// Grid over the work items x kFetchUnroll: first the codes, (K or V, entry, row of the page, chunk of the row)
// with entry = (row b, KV head h, page k) of selected / plan [B, Hk, K(, 2)]; then, fp8, the scales the same way
// with one chunk per row (the host pool's scales head-major). dst [lanes, N, Hk, chunks], cache [lanes, C, ps, Hk, chunks]; scales without chunks.
__global__ void __launch_bounds__(kFetchThreads)
    fetch_kernel(const FetchBuffers buf, const FetchRows rows, const int32_t* __restrict__ selected,
                 const int32_t* __restrict__ plan, int entries, int hk, int k_pages, int page_size, int chunks, int N,
                 int C, int64_t code_items, int64_t total) {
  pdl_wait();  // the plan comes from the preceding kernel
  pdl_trigger();
  const int64_t first = (int64_t{blockIdx.x} * kFetchUnroll) * kFetchThreads + threadIdx.x;
  uint4 val[kFetchUnroll];  // a scale in .x
  int64_t dst_at[kFetchUnroll], cache_at[kFetchUnroll];
  bool is_v[kFetchUnroll], is_scale[kFetchUnroll];
#pragma unroll
  for (int u = 0; u < kFetchUnroll; ++u) {  // every load first: several PCIe reads in flight per thread
    dst_at[u] = -1;
    const int64_t i = first + int64_t{u} * kFetchThreads;
    if (i >= total) continue;
    is_scale[u] = i >= code_items;
    const int ch = is_scale[u] ? 1 : chunks;
    const int64_t half = int64_t{entries} * page_size * ch;  // items of K (= of V)
    int64_t w = is_scale[u] ? i - code_items : i;
    is_v[u] = w >= half;
    if (is_v[u]) w -= half;
    const int64_t per_entry = int64_t{page_size} * ch;
    const int e = static_cast<int>(w / per_entry), r = static_cast<int>(w % per_entry / ch);
    const int c = static_cast<int>(w % ch);
    const int b = e / (hk * k_pages), h = e / k_pages % hk;
    const int p = selected[e], slot = plan[2 * e];
    const bool from_host = plan[2 * e + 1] != 0;
    const int64_t row = int64_t{p} * page_size + r;
    if (p < 0 || (!from_host && slot < 0) || row >= rows.row.host_tokens[b]) continue;
    const int64_t lane = rows.row.lane[b];
    const int64_t host_at = (row * hk + h) * ch + c;
    dst_at[u] = ((lane * N + row) * hk + h) * ch + c;
    cache_at[u] = slot >= 0 ? (((lane * C + slot) * page_size + r) * hk + h) * ch + c : -1;
    if (from_host) {
      if (is_scale[u])  // head-major: the threads of one (entry, K or V) read consecutive floats
        val[u].x = __float_as_uint((is_v[u] ? rows.host_v_scale : rows.host_k_scale)[b][h * rows.scale_cap[b] + row]);
      else
        val[u] = (is_v[u] ? rows.host_v : rows.host_k)[b][host_at];
      if (slot < 0) cache_at[u] = -1;
    } else {
      if (is_scale[u])
        val[u].x = __float_as_uint((is_v[u] ? buf.cache_v_scale : buf.cache_k_scale)[cache_at[u]]);
      else
        val[u] = (is_v[u] ? buf.cache_v : buf.cache_k)[cache_at[u]];
      cache_at[u] = -1;  // a hit: the cache already holds it
    }
  }
#pragma unroll
  for (int u = 0; u < kFetchUnroll; ++u) {
    if (dst_at[u] < 0) continue;
    if (is_scale[u]) {
      const float f = __uint_as_float(val[u].x);
      (is_v[u] ? buf.dst_v_scale : buf.dst_k_scale)[dst_at[u]] = f;
      if (cache_at[u] >= 0) (is_v[u] ? buf.cache_v_scale : buf.cache_k_scale)[cache_at[u]] = f;
    } else {
      (is_v[u] ? buf.dst_v : buf.dst_k)[dst_at[u]] = val[u];
      if (cache_at[u] >= 0) (is_v[u] ? buf.cache_v : buf.cache_k)[cache_at[u]] = val[u];
    }
  }
}

// Grid (ceil(T / 256), Hk): dst [Hk, cap] (mapped pinned host memory) row h, columns start + t = src [T, Hk] column h.
// Consecutive threads write consecutive floats: whole PCIe write sectors.
__global__ void store_scales_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t T, int hk,
                                    int64_t cap, int64_t start) {
  pdl_wait();  // the scales come from the preceding kernels
  pdl_trigger();
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int h = blockIdx.y;
  if (t < T) dst[h * cap + start + t] = src[t * hk + h];
}

}  // namespace

void page_cache_reset(const ops::PageCacheState& state, TensorView counters, ops::Stream s) {
  const auto fill = [&](const TensorView& t, int32_t value) {
    const int64_t n = t.numel();
    if (n == 0) return;
    launch_pdl(reset_kernel, dim3(std::min<unsigned>(ceil_div_u(n, 256), 1024u)), dim3(256), 0, s,
               t.data_as<int32_t>(), n, value);
    CUDA_CHECK_LAUNCH();
  };
  fill(state.page_slot, -1);
  fill(state.slot_page, -1);
  fill(state.slot_stamp, -1);
  fill(state.hand, 0);
  if (counters.data() != nullptr)  // [2] i64 zeros: 4 i32 zeros
    fill(TensorView(counters.data(), DType::kI32, Shape{4}, counters.device()), 0);
}

void page_cache_store_scales(TensorView dst, TensorView src, int64_t start, ops::Stream s) {
  const int64_t T = src.dim(0), Hk = src.dim(1);
  auto* host = static_cast<float*>(mapped_device_pointer(dst.data()));  // dst must be pinned (cudaHostAlloc)
  launch_pdl(store_scales_kernel, dim3(ceil_div_u(T, 256), static_cast<unsigned>(Hk)), dim3(256), 0, s, host,
             src.data_as<const float>(), T, static_cast<int>(Hk), dst.dim(1), start);
  CUDA_CHECK_LAUNCH();
}

void page_cache_plan_rows(TensorView plan, TensorView selected, const ops::PageCacheState& state,
                          std::span<const ops::PageCacheRow> rows, int64_t page_size, int32_t step,
                          TensorView counters, ops::Stream s) {
  const int64_t Hk = state.page_slot.dim(1), K = selected.dim(2);
  NANOVLLM_CHECK(K <= kMaxPlanPages, "page_cache_plan (cuda): a selection of ", K, " pages exceeds ",
                 kMaxPlanPages);
  RowTable table{};
  for (size_t b = 0; b < rows.size(); ++b)
    table.lane[b] = static_cast<int>(rows[b].lane), table.host_tokens[b] = rows[b].host_tokens;
  launch_pdl(plan_kernel, dim3(static_cast<unsigned>(Hk), static_cast<unsigned>(rows.size())), dim3(kPlanThreads), 0,
             s, plan.data_as<int32_t>(), selected.data_as<const int32_t>(), state.page_slot.data_as<int32_t>(),
             state.slot_page.data_as<int32_t>(), state.slot_stamp.data_as<int32_t>(), state.hand.data_as<int32_t>(),
             static_cast<int>(K), static_cast<int>(state.page_slot.dim(2)), static_cast<int>(state.slot_page.dim(2)),
             table, static_cast<int>(page_size), step, counters.data_as<unsigned long long>());
  CUDA_CHECK_LAUNCH();
}

void page_cache_fetch_rows(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v,
                           std::span<const KvCacheTensor> host_k, std::span<const KvCacheTensor> host_v,
                           const KvCacheTensor& cache_k, const KvCacheTensor& cache_v, TensorView selected,
                           TensorView plan, std::span<const ops::PageCacheRow> rows, ops::Stream s) {
  const int64_t B = static_cast<int64_t>(rows.size()), N = dst_k.dim(1), Hk = dst_k.dim(2), K = selected.dim(2);
  const int64_t C = cache_k.dim(1), ps = cache_k.dim(2);
  const int64_t row_bytes = dst_k.dim(3) * static_cast<int64_t>(dtype_size(dst_k.dtype()));
  bool vec = row_bytes % 16 == 0 && aligned16(dst_k.data()) && aligned16(dst_v.data()) && aligned16(cache_k.data()) &&
             aligned16(cache_v.data());
  for (size_t b = 0; b < rows.size(); ++b) vec = vec && aligned16(host_k[b].data()) && aligned16(host_v[b].data());
  NANOVLLM_CHECK(vec, "page_cache_fetch (cuda): rows of ", row_bytes,
                 " bytes and every buffer must be 16-byte aligned");
  const bool fp8 = dst_k.fp8();
  const int64_t entries = B * Hk * K, chunks = row_bytes / 16;
  const int64_t code_items = entries * ps * chunks * 2, total = code_items + (fp8 ? entries * ps * 2 : 0);
  // The host pools must be pinned (cudaHostAlloc): the kernel reads them through their mapped addresses (the
  // head-major scales are an allocation of their own).
  FetchRows table{};
  int64_t host_rows = 0;  // rows any host pool contributes
  for (size_t b = 0; b < rows.size(); ++b) {
    table.row.lane[b] = static_cast<int>(rows[b].lane), table.row.host_tokens[b] = rows[b].host_tokens;
    host_rows += rows[b].host_tokens;
    if (rows[b].host_tokens == 0) continue;  // nothing read from this row's pool
    const auto map = [](const KvCacheTensor& t, const uint4** codes, const float** scales) {
      *codes = static_cast<const uint4*>(mapped_device_pointer(t.data()));
      if (t.fp8()) *scales = static_cast<const float*>(mapped_device_pointer(t.scale.data()));
    };
    if (fp8) table.scale_cap[b] = host_k[b].scale.dim(1);
    map(host_k[b], &table.host_k[b], &table.host_k_scale[b]);
    map(host_v[b], &table.host_v[b], &table.host_v_scale[b]);
  }
  if (total == 0 || host_rows == 0) return;
  const FetchBuffers buf{dst_k.data_as<uint4>(),
                         dst_v.data_as<uint4>(),
                         cache_k.data_as<uint4>(),
                         cache_v.data_as<uint4>(),
                         fp8 ? dst_k.scale.data_as<float>() : nullptr,
                         fp8 ? dst_v.scale.data_as<float>() : nullptr,
                         fp8 ? cache_k.scale.data_as<float>() : nullptr,
                         fp8 ? cache_v.scale.data_as<float>() : nullptr};
  launch_pdl(fetch_kernel, dim3(ceil_div_u(total, int64_t{kFetchThreads} * kFetchUnroll)), dim3(kFetchThreads), 0, s,
             buf, table, selected.data_as<const int32_t>(), plan.data_as<const int32_t>(), static_cast<int>(entries),
             static_cast<int>(Hk), static_cast<int>(K), static_cast<int>(ps), static_cast<int>(chunks),
             static_cast<int>(N), static_cast<int>(C), code_items, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
