// The GPU hot-page cache of offloaded sparse decode on CUDA (contracts: kernels/page_cache_ops.h).
// - page_cache_plan: a CTA per KV head. Hits first (one thread per selected page; distinct pages own
//   distinct slots, so their stamps are written without conflict), then the misses take the free slots
//   (stamp != step) in circular order from the hand: one block scan ranks the misses, a chunked block scan
//   over the slots ranks the free ones, and miss r takes free slot r. Equal to the CPU's serial loop.
// - page_cache_fetch: a thread per 16-byte chunk of a row of a planned page, four chunks in flight per
//   thread. It reads the host pool through its mapped pinned pointer: on an H100 this gather moved 48-50
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

// Grid Hk. plan [Hk, K, 2]; selected [Hk, K]; page_slot [Hk, P]; slot_page, stamp [Hk, C]; hand [Hk].
__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(int32_t* __restrict__ plan, const int32_t* __restrict__ selected, int32_t* __restrict__ page_slot,
                int32_t* __restrict__ slot_page, int32_t* __restrict__ stamp, int32_t* __restrict__ hand, int K,
                int P, int C, int64_t host_tokens, int page_size, int step, unsigned long long* __restrict__ counters) {
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int victim[kMaxPlanPages];
  __shared__ int hits_s;
  const int h = blockIdx.x, tid = threadIdx.x;
  pdl_wait();  // the selection comes from the preceding kernel
  pdl_trigger();
  const int32_t* sel = selected + int64_t{h} * K;
  int32_t* out = plan + int64_t{h} * K * 2;
  int32_t* ps_row = page_slot + int64_t{h} * P;
  int32_t* sp_row = slot_page + int64_t{h} * C;
  int32_t* st_row = stamp + int64_t{h} * C;
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
  const int start = hand[h];
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
    if (missed > 0 && C > 0) hand[h] = (victim[missed - 1] + 1) % C;
    atomicAdd(&counters[0], static_cast<unsigned long long>(hits_s));
    atomicAdd(&counters[1], static_cast<unsigned long long>(missed));
  }
}

constexpr int kFetchThreads = 256;
constexpr int kFetchUnroll = 4;

// Grid over (entry, row of the page, chunk of the row) x kFetchUnroll. Rows are [*, Hk, chunks] arrays of
// Chunk (uint4: 16 bytes of elements; float: an fp8 row's scale, one chunk per row); the cache is [C, ps, Hk,
// chunks].
template <class Chunk>
__global__ void __launch_bounds__(kFetchThreads)
    fetch_kernel(Chunk* __restrict__ dst_k, Chunk* __restrict__ dst_v, const Chunk* __restrict__ host_k,
                 const Chunk* __restrict__ host_v, Chunk* __restrict__ cache_k, Chunk* __restrict__ cache_v,
                 const int32_t* __restrict__ selected, const int32_t* __restrict__ plan, int entries, int hk,
                 int k_pages, int page_size, int chunks, int64_t host_tokens) {
  pdl_wait();  // the plan comes from the preceding kernel
  pdl_trigger();
  const int64_t per_entry = int64_t{page_size} * chunks;
  const int64_t total = entries * per_entry * 2;  // K and V
  const int64_t first = (int64_t{blockIdx.x} * kFetchUnroll) * kFetchThreads + threadIdx.x;
  Chunk val[kFetchUnroll];
  int64_t dst_at[kFetchUnroll], cache_at[kFetchUnroll];
  bool is_v[kFetchUnroll];
#pragma unroll
  for (int u = 0; u < kFetchUnroll; ++u) {  // every load first: several PCIe reads in flight per thread
    dst_at[u] = -1;
    const int64_t i = first + int64_t{u} * kFetchThreads;
    if (i >= total) continue;
    is_v[u] = i >= total / 2;
    const int64_t w = is_v[u] ? i - total / 2 : i;
    const int e = static_cast<int>(w / per_entry), r = static_cast<int>(w % per_entry / chunks);
    const int c = static_cast<int>(w % chunks);
    const int h = e / k_pages, p = selected[e], slot = plan[2 * e];
    const bool from_host = plan[2 * e + 1] != 0;
    const int64_t row = int64_t{p} * page_size + r;
    if (p < 0 || (!from_host && slot < 0) || row >= host_tokens) continue;
    dst_at[u] = (row * hk + h) * chunks + c;
    cache_at[u] = slot >= 0 ? ((int64_t{slot} * page_size + r) * hk + h) * chunks + c : -1;
    if (from_host) {
      val[u] = (is_v[u] ? host_v : host_k)[dst_at[u]];
      if (slot < 0) cache_at[u] = -1;
    } else {
      val[u] = (is_v[u] ? cache_v : cache_k)[cache_at[u]];
      cache_at[u] = -1;  // a hit: the cache already holds it
    }
  }
#pragma unroll
  for (int u = 0; u < kFetchUnroll; ++u) {
    if (dst_at[u] < 0) continue;
    (is_v[u] ? dst_v : dst_k)[dst_at[u]] = val[u];
    if (cache_at[u] >= 0) (is_v[u] ? cache_v : cache_k)[cache_at[u]] = val[u];
  }
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

void page_cache_plan(TensorView plan, TensorView selected, const ops::PageCacheState& state, int64_t host_tokens,
                     int64_t page_size, int32_t step, TensorView counters, ops::Stream s) {
  const int64_t Hk = state.page_slot.dim(0), K = selected.dim(2);
  NANOVLLM_CHECK(K <= kMaxPlanPages, "page_cache_plan (cuda): a selection of ", K, " pages exceeds ",
                 kMaxPlanPages);
  launch_pdl(plan_kernel, dim3(static_cast<unsigned>(Hk)), dim3(kPlanThreads), 0, s, plan.data_as<int32_t>(),
             selected.data_as<const int32_t>(), state.page_slot.data_as<int32_t>(),
             state.slot_page.data_as<int32_t>(), state.slot_stamp.data_as<int32_t>(), state.hand.data_as<int32_t>(),
             static_cast<int>(K), static_cast<int>(state.page_slot.dim(1)), static_cast<int>(state.slot_page.dim(1)),
             host_tokens, static_cast<int>(page_size), step, counters.data_as<unsigned long long>());
  CUDA_CHECK_LAUNCH();
}

void page_cache_fetch(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v, const KvCacheTensor& host_k,
                      const KvCacheTensor& host_v, const KvCacheTensor& cache_k, const KvCacheTensor& cache_v,
                      TensorView selected, TensorView plan, int64_t host_tokens, ops::Stream s) {
  const int64_t Hk = dst_k.dim(1), K = selected.dim(2), ps = cache_k.dim(1);
  const int64_t row_bytes = dst_k.dim(2) * static_cast<int64_t>(dtype_size(dst_k.dtype()));
  const bool vec = row_bytes % 16 == 0 && aligned16(dst_k.data()) && aligned16(dst_v.data()) &&
                   aligned16(host_k.data()) && aligned16(host_v.data()) && aligned16(cache_k.data()) &&
                   aligned16(cache_v.data());
  NANOVLLM_CHECK(vec, "page_cache_fetch (cuda): rows of ", row_bytes,
                 " bytes and every buffer must be 16-byte aligned");
  const int64_t entries = Hk * K, chunks = row_bytes / 16;
  const int64_t total = entries * ps * chunks * 2;
  if (total == 0 || host_tokens == 0) return;
  // The host pool must be pinned (cudaHostAlloc): the kernel reads it through its mapped address.
  const auto* hk = static_cast<const uint4*>(mapped_device_pointer(host_k.data()));
  const auto* hv = static_cast<const uint4*>(mapped_device_pointer(host_v.data()));
  launch_pdl(fetch_kernel<uint4>, dim3(ceil_div_u(total, int64_t{kFetchThreads} * kFetchUnroll)), dim3(kFetchThreads),
             0, s, dst_k.data_as<uint4>(), dst_v.data_as<uint4>(), hk, hv, cache_k.data_as<uint4>(),
             cache_v.data_as<uint4>(), selected.data_as<const int32_t>(), plan.data_as<const int32_t>(),
             static_cast<int>(entries), static_cast<int>(Hk), static_cast<int>(K), static_cast<int>(ps),
             static_cast<int>(chunks), host_tokens);
  CUDA_CHECK_LAUNCH();
  if (!dst_k.fp8()) return;
  // The fp8 rows' scales, the same entries and rows: one f32 per (row, KV head). They may lie inside the pinned
  // allocation of the codes (the host pool's region): mapped through the codes' address plus their offset.
  const auto mapped = [](const KvCacheTensor& t) {
    return reinterpret_cast<const float*>(static_cast<const char*>(mapped_device_pointer(t.data())) +
                                          (t.scale.data_as<const char>() - t.data_as<const char>()));
  };
  const int64_t scale_total = entries * ps * 2;
  launch_pdl(fetch_kernel<float>, dim3(ceil_div_u(scale_total, int64_t{kFetchThreads} * kFetchUnroll)),
             dim3(kFetchThreads), 0, s, dst_k.scale.data_as<float>(), dst_v.scale.data_as<float>(),
             mapped(host_k), mapped(host_v), cache_k.scale.data_as<float>(),
             cache_v.scale.data_as<float>(), selected.data_as<const int32_t>(), plan.data_as<const int32_t>(),
             static_cast<int>(entries), static_cast<int>(Hk), static_cast<int>(K), static_cast<int>(ps), 1,
             host_tokens);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
