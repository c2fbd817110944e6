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

// `s` with a leading dimension of `lead`.
Shape with_lead(int64_t lead, const Shape& s) {
  NANOVLLM_ASSERT(s.ndim < kMaxDims);
  Shape out;
  out.ndim = s.ndim + 1;
  out.dims[0] = lead;
  for (int i = 0; i < s.ndim; ++i) out.dims[static_cast<size_t>(i + 1)] = s[i];
  return out;
}

// The state's four i32 tensors on `dev`, consistent with each other: one lane's (lanes < 0: page_slot [Hk, P],
// slot_page and slot_stamp [Hk, C], hand [Hk]) or `lanes` lanes' stacked (a leading lane dimension).
struct StateDims {
  int64_t lanes, Hk, P, C;
};
StateDims check_state(std::string_view op, const PageCacheState& st, Device dev, bool stacked) {
  const int lead = stacked ? 1 : 0;
  check_tensor(op, "page_slot", st.page_slot, dev, 2 + lead);
  check_i32(op, "page_slot", st.page_slot);
  const int64_t lanes = stacked ? st.page_slot.dim(0) : 1;
  const int64_t Hk = st.page_slot.dim(lead), P = st.page_slot.dim(lead + 1);
  check_tensor(op, "slot_page", st.slot_page, dev, 2 + lead);
  check_i32(op, "slot_page", st.slot_page);
  const int64_t C = st.slot_page.dim(lead + 1);
  const auto dims = [&](std::initializer_list<int64_t> d) { return stacked ? with_lead(lanes, Shape(d)) : Shape(d); };
  check_i32_tensor(op, "slot_page", st.slot_page, dev, dims({Hk, C}));
  check_i32_tensor(op, "slot_stamp", st.slot_stamp, dev, dims({Hk, C}));
  check_i32_tensor(op, "hand", st.hand, dev, dims({Hk}));
  return {lanes, Hk, P, C};
}

// One lane's state as a stack of one lane.
PageCacheState stacked(const PageCacheState& st) {
  const auto one = [](const TensorView& t) { return t.reshape(with_lead(1, t.shape())); };
  return {one(st.page_slot), one(st.slot_page), one(st.slot_stamp), one(st.hand)};
}

// selected [B, Hk, K] i32 on dev; returns K.
int64_t check_selection(std::string_view op, const TensorView& selected, int64_t B, int64_t Hk, Device dev) {
  check_tensor(op, "selected", selected, dev, 3);
  check_i32(op, "selected", selected);
  NANOVLLM_CHECK(selected.dim(0) == B && selected.dim(1) == Hk, op, ": selected ", selected.shape().str(),
                 " must be [", B, ", ", Hk, ", pages]");
  return selected.dim(2);
}

void check_counters(std::string_view op, const TensorView& counters, Device dev) {
  check_tensor(op, "counters", counters, dev, 1);
  NANOVLLM_CHECK(counters.dtype() == DType::kI64 && counters.dim(0) == 2, op, ": counters must be [2] I64, got ",
                 counters.shape().str(), " ", dtype_name(counters.dtype()));
}

// 1..kPageCacheMaxRows rows of distinct lanes in [0, lanes), host_tokens in [0, max_tokens].
void check_rows(std::string_view op, std::span<const PageCacheRow> rows, int64_t lanes, int64_t max_tokens) {
  const auto B = static_cast<int64_t>(rows.size());
  NANOVLLM_CHECK(B >= 1 && B <= kPageCacheMaxRows, op, ": ", B, " rows, expected 1 to ", kPageCacheMaxRows);
  for (int64_t b = 0; b < B; ++b) {
    const PageCacheRow& r = rows[static_cast<size_t>(b)];
    NANOVLLM_CHECK(r.lane >= 0 && r.lane < lanes, op, ": row ", b, "'s lane ", r.lane, " is outside [0, ", lanes,
                   ")");
    NANOVLLM_CHECK(r.host_tokens >= 0 && r.host_tokens <= max_tokens, op, ": row ", b, "'s host_tokens ",
                   r.host_tokens, " is outside [0, ", max_tokens, "]");
    for (int64_t a = 0; a < b; ++a)
      NANOVLLM_CHECK(rows[static_cast<size_t>(a)].lane != r.lane, op, ": rows ", a, " and ", b, " share lane ",
                     r.lane);
  }
}

}  // namespace

void page_cache_reset(const PageCacheState& state, TensorView counters, Stream s) {
  constexpr std::string_view op = "page_cache_reset";
  const Device dev = state.page_slot.device();
  check_state(op, state, dev, false);
  if (counters.data() != nullptr) check_counters(op, counters, dev);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(page_cache_reset, dev, state, counters, s);
  cpu::page_cache_reset(state, counters);
}

void page_cache_store_scales(TensorView dst, TensorView src, int64_t start, Stream s) {
  constexpr std::string_view op = "page_cache_store_scales";
  const Device dev = src.device();
  check_tensor(op, "src", src, dev, 2);
  check_tensor(op, "dst", dst, Device::cpu(), 2);  // the host pool
  NANOVLLM_CHECK(src.dtype() == DType::kF32 && dst.dtype() == DType::kF32, op, ": src and dst must be F32, got ",
                 dtype_name(src.dtype()), " and ", dtype_name(dst.dtype()));
  const int64_t T = src.dim(0), Hk = src.dim(1);
  NANOVLLM_CHECK(dst.dim(0) == Hk && start >= 0 && start + T <= dst.dim(1), op, ": rows [", start, ", ", start + T,
                 ") of ", Hk, " heads do not fit dst ", dst.shape().str());
  if (T == 0) return;
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(page_cache_store_scales, dev, dst, src, start, s);
  cpu::page_cache_store_scales(dst, src, start);
}

void page_cache_plan(TensorView plan, TensorView selected, const PageCacheState& state, int64_t host_tokens,
                     int64_t page_size, int32_t step, TensorView counters, Stream s) {
  check_state("page_cache_plan", state, state.page_slot.device(), false);
  const PageCacheRow row{.lane = 0, .host_tokens = host_tokens};
  page_cache_plan_rows(plan, selected, stacked(state), {&row, 1}, page_size, step, counters, s);
}

void page_cache_plan_rows(TensorView plan, TensorView selected, const PageCacheState& state,
                          std::span<const PageCacheRow> rows, int64_t page_size, int32_t step, TensorView counters,
                          Stream s) {
  constexpr std::string_view op = "page_cache_plan";
  const Device dev = state.page_slot.device();
  const StateDims d = check_state(op, state, dev, true);
  const auto B = static_cast<int64_t>(rows.size());
  NANOVLLM_CHECK(page_size >= 1, op, ": page_size must be >= 1, got ", page_size);
  check_rows(op, rows, d.lanes, d.P * page_size);  // host_tokens fit the P pages of page_slot
  const int64_t K = check_selection(op, selected, B, d.Hk, dev);
  check_i32_tensor(op, "plan", plan, dev, {B, d.Hk, K, 2});
  check_counters(op, counters, dev);
  NANOVLLM_CHECK(d.C == 0 || d.C >= K, op, ": ", d.C, " cache slots per KV head cannot hold a selection of ", K,
                 " pages");
  NANOVLLM_CHECK(step >= 0, op, ": step must be >= 0, got ", step);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(page_cache_plan_rows, dev, plan, selected, state, rows, page_size, step, counters, s);
  const int32_t* sel = selected.data_as<const int32_t>();
  for (int64_t i = 0; i < B * d.Hk * K; ++i)
    NANOVLLM_CHECK(sel[i] >= -1 && sel[i] < d.P, op, ": selected page ", sel[i], " is outside [-1, ", d.P, ")");
  cpu::page_cache_plan_rows(plan, selected, state, rows, page_size, step, counters);
}

void page_cache_fetch(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v, const KvCacheTensor& host_k,
                      const KvCacheTensor& host_v, const KvCacheTensor& cache_k, const KvCacheTensor& cache_v,
                      TensorView selected, TensorView plan, int64_t host_tokens, Stream s) {
  constexpr std::string_view op = "page_cache_fetch";
  const Device dev = dst_k.device();
  check_kv_pair(op, dst_k, dst_v, dev, 3, "dst_k", "dst_v");
  check_kv_pair(op, cache_k, cache_v, dev, 4, "cache_k", "cache_v");
  const auto one = [](const KvCacheTensor& t) { return t.reshape(with_lead(1, t.shape())); };
  const PageCacheRow row{.lane = 0, .host_tokens = host_tokens};
  page_cache_fetch_rows(one(dst_k), one(dst_v), {&host_k, 1}, {&host_v, 1}, one(cache_k), one(cache_v), selected,
                        plan, {&row, 1}, s);
}

void page_cache_fetch_rows(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v,
                           std::span<const KvCacheTensor> host_k, std::span<const KvCacheTensor> host_v,
                           const KvCacheTensor& cache_k, const KvCacheTensor& cache_v, TensorView selected,
                           TensorView plan, std::span<const PageCacheRow> rows, Stream s) {
  constexpr std::string_view op = "page_cache_fetch";
  const Device dev = dst_k.device();
  // Each pair: one format (kv_cache.h: an fp8 one moves its rows' scales with them), the destination's.
  check_kv_pair(op, dst_k, dst_v, dev, 4, "dst_k", "dst_v");
  const int64_t lanes = dst_k.dim(0), N = dst_k.dim(1), Hk = dst_k.dim(2), D = dst_k.dim(3);
  const auto B = static_cast<int64_t>(rows.size());
  check_rows(op, rows, lanes, N);
  const auto same_dtype = [&](std::string_view name, const TensorView& t) {
    NANOVLLM_CHECK(t.dtype() == dst_k.dtype(), op, ": ", name, " is ", dtype_name(t.dtype()), ", dst_k is ",
                   dtype_name(dst_k.dtype()));
  };
  NANOVLLM_CHECK(static_cast<int64_t>(host_k.size()) == B && static_cast<int64_t>(host_v.size()) == B, op, ": ",
                 host_k.size(), " host K and ", host_v.size(), " host V pools for ", B, " rows");
  // The host pools are host memory on both backends (pinned on CUDA: the kernel reads them over PCIe).
  for (int64_t b = 0; b < B; ++b) {
    const int64_t tokens = rows[static_cast<size_t>(b)].host_tokens;
    for (const KvCacheTensor* t : {&host_k[static_cast<size_t>(b)], &host_v[static_cast<size_t>(b)]}) {
      const char* name = t == &host_k[static_cast<size_t>(b)] ? "host_k" : "host_v";
      check_tensor(op, name, *t, Device::cpu(), 3);
      NANOVLLM_CHECK(t->dim(1) == Hk && t->dim(2) == D && t->dim(0) >= tokens, op, ": row ", b, "'s ", name, " ",
                     t->shape().str(), " must be [>= ", tokens, ", ", Hk, ", ", D, "]");
      same_dtype(name, *t);
      NANOVLLM_CHECK(t->fp8() == dst_k.fp8(), op, ": row ", b, "'s ", name, (t->fp8() ? " has" : " lacks"),
                     " scales, dst_k ", (dst_k.fp8() ? "has them" : "does not"));
      if (!t->fp8()) continue;
      check_tensor(op, "host scales", t->scale, Device::cpu(), 2);  // head-major
      NANOVLLM_CHECK(t->scale.dtype() == DType::kF32 && t->scale.dim(0) == Hk && t->scale.dim(1) >= tokens, op,
                     ": row ", b, "'s ", name, " scales ", t->scale.shape().str(), " ", dtype_name(t->scale.dtype()),
                     " must be [", Hk, ", >= ", tokens, "] F32 (head-major)");
    }
  }
  check_kv_pair(op, cache_k, cache_v, dev, 5, "cache_k", "cache_v");
  const int64_t C = cache_k.dim(1);
  NANOVLLM_CHECK(cache_k.dim(0) == lanes && cache_k.dim(3) == Hk && cache_k.dim(4) == D, op, ": cache_k ",
                 cache_k.shape().str(), " must be [", lanes, ", slots, page_size, ", Hk, ", ", D, "]");
  same_dtype("cache_k", cache_k);
  const int64_t K = check_selection(op, selected, B, Hk, dev);
  check_i32_tensor(op, "plan", plan, dev, {B, Hk, K, 2});
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(page_cache_fetch_rows, dev, dst_k, dst_v, host_k, host_v, cache_k, cache_v, selected,
                           plan, rows, s);
  const int32_t* sel = selected.data_as<const int32_t>();
  const int32_t* pl = plan.data_as<const int32_t>();
  for (int64_t i = 0; i < B * Hk * K; ++i) {
    NANOVLLM_CHECK(sel[i] >= -1, op, ": selected page ", sel[i], " is negative");  // rows past host_tokens are never read
    NANOVLLM_CHECK(pl[2 * i] >= -1 && pl[2 * i] < C, op, ": plan slot ", pl[2 * i], " is outside [-1, ", C, ")");
  }
  cpu::page_cache_fetch_rows(dst_k, dst_v, host_k, host_v, cache_k, cache_v, selected, plan, rows);
}

}  // namespace nanovllm::ops
