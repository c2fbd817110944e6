// Page cache op entry points: validate (shapes, dtypes, devices; on the host also the index contents),
// then dispatch.
#include "nanovllm/kernels/page_cache_ops.h"

#include <string_view>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cpu/cpu_page_cache.h"
#include "nanovllm/kernels/cuda/cuda_page_cache.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {
namespace {

// The state's four i32 tensors on `dev`, consistent with each other. Returns {Hk, P, C}.
struct StateDims {
  int64_t Hk, P, C;
};
StateDims check_state(std::string_view op, const PageCacheState& st, Device dev) {
  check_tensor(op, "page_slot", st.page_slot, dev, 2);
  check_i32(op, "page_slot", st.page_slot);
  const int64_t Hk = st.page_slot.dim(0), P = st.page_slot.dim(1);
  check_tensor(op, "slot_page", st.slot_page, dev, 2);
  check_i32(op, "slot_page", st.slot_page);
  const int64_t C = st.slot_page.dim(1);
  NANOVLLM_CHECK(st.slot_page.dim(0) == Hk, op, ": slot_page ", st.slot_page.shape().str(), " must be [", Hk,
                 ", slots]");
  check_i32_tensor(op, "slot_stamp", st.slot_stamp, dev, {Hk, C});
  check_i32_tensor(op, "hand", st.hand, dev, {Hk});
  return {Hk, P, C};
}

// selected [1, Hk, K] i32 on dev; returns K.
int64_t check_selection(std::string_view op, const TensorView& selected, int64_t Hk, Device dev) {
  check_tensor(op, "selected", selected, dev, 3);
  check_i32(op, "selected", selected);
  NANOVLLM_CHECK(selected.dim(0) == 1 && selected.dim(1) == Hk, op, ": selected ", selected.shape().str(),
                 " must be [1, ", Hk, ", pages]");
  return selected.dim(2);
}

void check_counters(std::string_view op, const TensorView& counters, Device dev) {
  check_tensor(op, "counters", counters, dev, 1);
  NANOVLLM_CHECK(counters.dtype() == DType::kI64 && counters.dim(0) == 2, op, ": counters must be [2] I64, got ",
                 counters.shape().str(), " ", dtype_name(counters.dtype()));
}

}  // namespace

void page_cache_reset(const PageCacheState& state, TensorView counters, Stream s) {
  constexpr std::string_view op = "page_cache_reset";
  const Device dev = state.page_slot.device();
  check_state(op, state, dev);
  if (counters.data() != nullptr) check_counters(op, counters, dev);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(page_cache_reset, dev, state, counters, s);
  cpu::page_cache_reset(state, counters);
}

void page_cache_plan(TensorView plan, TensorView selected, const PageCacheState& state, int64_t host_tokens,
                     int64_t page_size, int32_t step, TensorView counters, Stream s) {
  constexpr std::string_view op = "page_cache_plan";
  const Device dev = state.page_slot.device();
  const StateDims d = check_state(op, state, dev);
  const int64_t K = check_selection(op, selected, d.Hk, dev);
  check_i32_tensor(op, "plan", plan, dev, {1, d.Hk, K, 2});
  check_counters(op, counters, dev);
  NANOVLLM_CHECK(page_size >= 1 && host_tokens >= 0 && host_tokens <= d.P * page_size, op, ": host_tokens ",
                 host_tokens, " and page_size ", page_size, " do not fit the ", d.P, " pages of page_slot");
  NANOVLLM_CHECK(d.C == 0 || d.C >= K, op, ": ", d.C, " cache slots per KV head cannot hold a selection of ", K,
                 " pages");
  NANOVLLM_CHECK(step >= 0, op, ": step must be >= 0, got ", step);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(page_cache_plan, dev, plan, selected, state, host_tokens, page_size, step, counters, s);
  const int32_t* sel = selected.data_as<const int32_t>();
  for (int64_t i = 0; i < d.Hk * K; ++i)
    NANOVLLM_CHECK(sel[i] >= -1 && sel[i] < d.P, op, ": selected page ", sel[i], " is outside [-1, ", d.P, ")");
  cpu::page_cache_plan(plan, selected, state, host_tokens, page_size, step, counters);
}

void page_cache_fetch(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v, const KvCacheTensor& host_k,
                      const KvCacheTensor& host_v, const KvCacheTensor& cache_k, const KvCacheTensor& cache_v,
                      TensorView selected, TensorView plan, int64_t host_tokens, Stream s) {
  constexpr std::string_view op = "page_cache_fetch";
  const Device dev = dst_k.device();
  // Each pair: one format (kv_cache.h: an fp8 one moves its rows' scales with them), the destination's.
  check_kv_pair(op, dst_k, dst_v, dev, 3, "dst_k", "dst_v");
  const int64_t N = dst_k.dim(0), Hk = dst_k.dim(1), D = dst_k.dim(2);
  const auto same_dtype = [&](const char* name, const TensorView& t) {
    NANOVLLM_CHECK(t.dtype() == dst_k.dtype(), op, ": ", name, " is ", dtype_name(t.dtype()), ", dst_k is ",
                   dtype_name(dst_k.dtype()));
  };
  // The host pool is host memory on both backends (pinned on CUDA: the kernel reads it over PCIe).
  const Device host = Device::cpu();
  check_kv_pair(op, host_k, host_v, host, 3, "host_k", "host_v");
  NANOVLLM_CHECK(host_k.dim(1) == Hk && host_k.dim(2) == D && host_k.dim(0) >= host_tokens, op, ": host_k ",
                 host_k.shape().str(), " must be [>= ", host_tokens, ", ", Hk, ", ", D, "]");
  same_dtype("host_k", host_k);
  check_kv_pair(op, cache_k, cache_v, dev, 4, "cache_k", "cache_v");
  const int64_t C = cache_k.dim(0);
  NANOVLLM_CHECK(cache_k.dim(2) == Hk && cache_k.dim(3) == D, op, ": cache_k ", cache_k.shape().str(),
                 " must be [slots, page_size, ", Hk, ", ", D, "]");
  same_dtype("cache_k", cache_k);
  const int64_t K = check_selection(op, selected, Hk, dev);
  check_i32_tensor(op, "plan", plan, dev, {1, Hk, K, 2});
  NANOVLLM_CHECK(host_tokens >= 0 && host_tokens <= N, op, ": host_tokens ", host_tokens,
                 " exceeds the layer buffer's ", N, " tokens");
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(page_cache_fetch, dev, dst_k, dst_v, host_k, host_v, cache_k, cache_v, selected, plan,
                           host_tokens, s);
  const int32_t* sel = selected.data_as<const int32_t>();
  const int32_t* pl = plan.data_as<const int32_t>();
  for (int64_t i = 0; i < Hk * K; ++i) {
    NANOVLLM_CHECK(sel[i] >= -1, op, ": selected page ", sel[i], " is negative");  // rows past host_tokens are never read
    NANOVLLM_CHECK(pl[2 * i] >= -1 && pl[2 * i] < C, op, ": plan slot ", pl[2 * i], " is outside [-1, ", C, ")");
  }
  cpu::page_cache_fetch(dst_k, dst_v, host_k, host_v, cache_k, cache_v, selected, plan, host_tokens);
}

}  // namespace nanovllm::ops
