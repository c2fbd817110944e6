// The CUDA page cache ops against their CPU references: the plan (hits, misses, victims, the whole
// bookkeeping state and the counters) identical over many random steps with hot sets, straddling pages and
// no-cache mode; the fetch bit-identical, reading a pinned host pool over PCIe (bf16, head_dim 64 and 128,
// odd page sizes); and the batched *_rows ops (several rows, each its own lane and host pool, fp8 codes and scales
// in one launch) and page_cache_store_scales equal to their CPU reference.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/page_cache_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::on;

struct HostState {
  std::vector<int32_t> page_slot, slot_page, stamp, hand;
  std::vector<int64_t> counters{0, 0};
  HostState(int64_t Hk, int64_t P, int64_t C)
      : page_slot(static_cast<size_t>(Hk * P)), slot_page(static_cast<size_t>(Hk * C)),
        stamp(static_cast<size_t>(Hk * C)), hand(static_cast<size_t>(Hk)) {}
  ops::PageCacheState state(int64_t Hk, int64_t P, int64_t C) {
    return {TensorView(page_slot.data(), DType::kI32, {Hk, P}), TensorView(slot_page.data(), DType::kI32, {Hk, C}),
            TensorView(stamp.data(), DType::kI32, {Hk, C}), TensorView(hand.data(), DType::kI32, {Hk})};
  }
  TensorView counter_view() { return TensorView(counters.data(), DType::kI64, {2}); }
};

struct DevState {
  DeviceTensor page_slot, slot_page, stamp, hand, counters;
  DevState(int64_t Hk, int64_t P, int64_t C)
      : page_slot(DType::kI32, {Hk, P}), slot_page(DType::kI32, {Hk, C}), stamp(DType::kI32, {Hk, C}),
        hand(DType::kI32, {Hk}), counters(DType::kI64, {2}) {}
  ops::PageCacheState state() const { return {page_slot.view(), slot_page.view(), stamp.view(), hand.view()}; }
};

void check_plan(int64_t Hk, int64_t P, int64_t C, int64_t K, int64_t ps, uint32_t seed) {
  SCOPED_TRACE("Hk " + std::to_string(Hk) + " P " + std::to_string(P) + " C " + std::to_string(C) + " K " +
               std::to_string(K) + " ps " + std::to_string(ps));
  std::mt19937 rng(seed);
  HostState cpu(Hk, P, C);
  DevState gpu(Hk, P, C);
  gpu.page_slot.fill_bytes(0x5a);  // garbage the reset must clear
  ops::page_cache_reset(cpu.state(Hk, P, C), cpu.counter_view());
  ops::page_cache_reset(gpu.state(), gpu.counters.view(), on());
  const int64_t hot = std::min<int64_t>(P, 3 * K);  // selections drawn mostly from a hot set: hits happen
  for (int32_t step = 0; step < 60; ++step) {
    const int64_t host_tokens = step % 7 == 0 ? P * ps : std::uniform_int_distribution<int64_t>(0, P * ps)(rng);
    std::vector<int32_t> sel(static_cast<size_t>(Hk * K), -1);
    for (int64_t h = 0; h < Hk; ++h) {
      std::vector<int32_t> pages(static_cast<size_t>(P));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.begin() + hot, rng);
      if (step % 5 == 4) std::shuffle(pages.begin(), pages.end(), rng);  // a cold step: mostly misses
      const int64_t n = std::uniform_int_distribution<int64_t>(K / 2, K)(rng);
      std::sort(pages.begin(), pages.begin() + n);
      std::copy(pages.begin(), pages.begin() + n, sel.begin() + h * K);
    }
    std::vector<int32_t> cpu_plan(static_cast<size_t>(Hk * K * 2));
    ops::page_cache_plan(TensorView(cpu_plan.data(), DType::kI32, {1, Hk, K, 2}),
                         TensorView(sel.data(), DType::kI32, {1, Hk, K}), cpu.state(Hk, P, C), host_tokens, ps, step,
                         cpu.counter_view());
    DeviceTensor d_sel(DType::kI32, {1, Hk, K}, sel), d_plan(DType::kI32, {1, Hk, K, 2});
    ops::page_cache_plan(d_plan.view(), d_sel.view(), gpu.state(), host_tokens, ps, step, gpu.counters.view(), on());
    ASSERT_EQ(d_plan.download<int32_t>(), cpu_plan) << "step " << step;
    ASSERT_EQ(gpu.page_slot.download<int32_t>(), cpu.page_slot) << "step " << step;
    ASSERT_EQ(gpu.slot_page.download<int32_t>(), cpu.slot_page) << "step " << step;
    ASSERT_EQ(gpu.stamp.download<int32_t>(), cpu.stamp) << "step " << step;
    ASSERT_EQ(gpu.hand.download<int32_t>(), cpu.hand) << "step " << step;
  }
  EXPECT_EQ(gpu.counters.download<int64_t>(), cpu.counters);
  if (C > 0) {
    EXPECT_GT(cpu.counters[0], 0) << "no hits: the test exercised nothing";
  }
  EXPECT_GT(cpu.counters[1], 0);
}

TEST(CudaPageCache, PlanMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  check_plan(2, 40, 8, 6, 16, 1);
  check_plan(8, 2048, 512, 128, 16, 2);    // the 128K-context shape at a 2048-token budget
  check_plan(4, 700, 300, 300, 32, 3);     // C == K: every free slot is taken; > one scan chunk
  check_plan(3, 5000, 1100, 520, 16, 4);   // selections and slots past one 256-thread chunk
  check_plan(2, 64, 0, 10, 8, 5);          // no cache
}

void check_fetch(int64_t D, int64_t ps, uint32_t seed) {
  SCOPED_TRACE("D " + std::to_string(D) + " ps " + std::to_string(ps));
  std::mt19937 rng(seed);
  const int64_t Hk = 4, P = 37, N = P * ps, C = 12, K = 9;
  const int64_t host_tokens = N - ps / 2 - 1;  // the last host page straddles
  const size_t row_elems = static_cast<size_t>(Hk * D);
  const auto host_data = cuda_test::random_bf16(static_cast<size_t>(N) * row_elems, rng);
  const auto host_vdata = cuda_test::random_bf16(static_cast<size_t>(N) * row_elems, rng);
  Buffer pinned_k(pinned_host_allocator(), DType::kBF16, Shape{N, Hk, D});
  Buffer pinned_v(pinned_host_allocator(), DType::kBF16, Shape{N, Hk, D});
  std::copy(host_data.bits.begin(), host_data.bits.end(), pinned_k.view().data_as<uint16_t>());
  std::copy(host_vdata.bits.begin(), host_vdata.bits.end(), pinned_v.view().data_as<uint16_t>());
  const auto dst0 = cuda_test::random_bf16(static_cast<size_t>(N) * row_elems, rng);
  const auto cache0 = cuda_test::random_bf16(static_cast<size_t>(C * ps) * row_elems, rng);
  std::vector<uint16_t> dk = dst0.bits, dv = dst0.bits, ck = cache0.bits, cv = cache0.bits;  // CPU side
  DeviceTensor g_dk(DType::kBF16, {N, Hk, D}, dk), g_dv(DType::kBF16, {N, Hk, D}, dv);
  DeviceTensor g_ck(DType::kBF16, {C, ps, Hk, D}, ck), g_cv(DType::kBF16, {C, ps, Hk, D}, cv);
  HostState st(Hk, P, C);
  ops::page_cache_reset(st.state(Hk, P, C), st.counter_view());
  for (int32_t step = 0; step < 6; ++step) {
    std::vector<int32_t> sel(static_cast<size_t>(Hk * K), -1);
    for (int64_t h = 0; h < Hk; ++h) {
      std::vector<int32_t> pages(static_cast<size_t>(P));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.begin() + 14, rng);
      std::swap(pages[0], pages[static_cast<size_t>(P - 1)]);  // the straddling page, always
      std::sort(pages.begin(), pages.begin() + K);
      std::copy(pages.begin(), pages.begin() + K, sel.begin() + h * K);
    }
    std::vector<int32_t> plan(static_cast<size_t>(Hk * K * 2));
    const TensorView sel_v(sel.data(), DType::kI32, {1, Hk, K}), plan_v(plan.data(), DType::kI32, {1, Hk, K, 2});
    ops::page_cache_plan(plan_v, sel_v, st.state(Hk, P, C), host_tokens, ps, step, st.counter_view());
    ops::page_cache_fetch(TensorView(dk.data(), DType::kBF16, {N, Hk, D}),
                          TensorView(dv.data(), DType::kBF16, {N, Hk, D}), pinned_k.view(), pinned_v.view(),
                          TensorView(ck.data(), DType::kBF16, {C, ps, Hk, D}),
                          TensorView(cv.data(), DType::kBF16, {C, ps, Hk, D}), sel_v, plan_v, host_tokens);
    DeviceTensor d_sel(DType::kI32, {1, Hk, K}, sel), d_plan(DType::kI32, {1, Hk, K, 2}, plan);
    ops::page_cache_fetch(g_dk.view(), g_dv.view(), pinned_k.view(), pinned_v.view(), g_ck.view(), g_cv.view(),
                          d_sel.view(), d_plan.view(), host_tokens, on());
    ASSERT_EQ(g_dk.download<uint16_t>(), dk) << "step " << step;
    ASSERT_EQ(g_dv.download<uint16_t>(), dv) << "step " << step;
    ASSERT_EQ(g_ck.download<uint16_t>(), ck) << "step " << step;
    ASSERT_EQ(g_cv.download<uint16_t>(), cv) << "step " << step;
  }
  EXPECT_GT(st.counters[0], 0);
  EXPECT_NE(dk, dst0.bits);
}

TEST(CudaPageCache, FetchMatchesCpuFromPinnedHostMemory) {
  SKIP_WITHOUT_CUDA();
  check_fetch(128, 16, 7);
  check_fetch(64, 24, 8);
  check_fetch(128, 5, 9);
}

// One row's fp8 host pool as OffloadHostPool lays it out for the sparse fetch: [N, Hk, D] codes and, in a pinned
// allocation of their own, the scales head-major [Hk, N].
struct PinnedFp8Pool {
  int64_t N, Hk, D;
  Buffer codes, scales;
  PinnedFp8Pool(int64_t n, int64_t hk, int64_t d, std::mt19937& rng)
      : N(n), Hk(hk), D(d), codes(pinned_host_allocator(), DType::kF8E4M3, Shape{n, hk, d}),
        scales(pinned_host_allocator(), DType::kF32, Shape{hk, n}) {
    auto* c = codes.view().data_as<uint8_t>();
    for (int64_t i = 0; i < N * Hk * D; ++i) c[i] = static_cast<uint8_t>(rng() % 0x78);  // finite e4m3
    auto* sc = scales.view().data_as<float>();
    for (int64_t i = 0; i < N * Hk; ++i) sc[i] = static_cast<float>(rng() % 997 + 1) / 64.0f;
  }
  KvCacheTensor view() const { return {codes.view(), scales.view()}; }
};

// Stacked fp8 rows of `shape` (codes) on the host and on the device, the same random start.
struct Fp8Stack {
  Shape shape, rows;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  DeviceTensor d_codes, d_scales;
  static Shape rows_of(Shape s) {
    --s.ndim;
    return s;
  }
  template <class T> static std::vector<T> random(int64_t n, std::mt19937& rng, uint32_t mod) {
    std::vector<T> v(static_cast<size_t>(n));
    for (T& x : v) x = static_cast<T>(rng() % mod);
    return v;
  }
  Fp8Stack(Shape s, std::mt19937& rng)
      : shape(s), rows(rows_of(s)), codes(random<uint8_t>(s.numel(), rng, 0x78)),
        scales(random<float>(rows.numel(), rng, 991)), d_codes(DType::kF8E4M3, s, codes),
        d_scales(DType::kF32, rows, scales) {}
  KvCacheTensor host() {
    return {TensorView(codes.data(), DType::kF8E4M3, shape), TensorView(scales.data(), DType::kF32, rows)};
  }
  KvCacheTensor device() const { return {d_codes.view(), d_scales.view()}; }
  void expect_same(const char* what, int32_t step) const {
    ASSERT_EQ(d_codes.download<uint8_t>(), codes) << what << " codes, step " << step;
    ASSERT_EQ(d_scales.download<float>(), scales) << what << " scales, step " << step;
  }
};

void check_rows(int64_t Hk, int64_t D, int64_t ps, int64_t C, int64_t K, uint32_t seed) {
  SCOPED_TRACE("Hk " + std::to_string(Hk) + " D " + std::to_string(D) + " ps " + std::to_string(ps) + " C " +
               std::to_string(C) + " K " + std::to_string(K));
  std::mt19937 rng(seed);
  const int64_t lanes = 5, P = 37, N = P * ps;
  // Rows in lanes {3, 0, 4}: a full pool, one ending mid-page, a short one.
  const std::vector<ops::PageCacheRow> rows{{.lane = 3, .host_tokens = N},
                                            {.lane = 0, .host_tokens = N - ps / 2 - 1},
                                            {.lane = 4, .host_tokens = 9 * ps + 1}};
  const auto B = static_cast<int64_t>(rows.size());
  std::vector<PinnedFp8Pool> host_k, host_v;
  std::vector<KvCacheTensor> hk, hv;
  host_k.reserve(static_cast<size_t>(B)), host_v.reserve(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) host_k.emplace_back(N, Hk, D, rng), host_v.emplace_back(N, Hk, D, rng);
  for (int64_t b = 0; b < B; ++b) hk.push_back(host_k[b].view()), hv.push_back(host_v[b].view());
  Fp8Stack dst_k({lanes, N, Hk, D}, rng), dst_v({lanes, N, Hk, D}, rng);
  Fp8Stack cache_k({lanes, C, ps, Hk, D}, rng), cache_v({lanes, C, ps, Hk, D}, rng);
  HostState cpu(lanes * Hk, P, C);  // the lanes stacked: [lanes x Hk] heads
  DevState gpu(lanes * Hk, P, C);
  const auto stacked = [&](const ops::PageCacheState& st) -> ops::PageCacheState {
    return {st.page_slot.reshape({lanes, Hk, P}), st.slot_page.reshape({lanes, Hk, C}),
            st.slot_stamp.reshape({lanes, Hk, C}), st.hand.reshape({lanes, Hk})};
  };
  ops::page_cache_reset(cpu.state(lanes * Hk, P, C), cpu.counter_view());
  ops::page_cache_reset(gpu.state(), gpu.counters.view(), on());
  for (int32_t step = 0; step < 8; ++step) {
    std::vector<int32_t> sel(static_cast<size_t>(B * Hk * K), -1);
    for (int64_t i = 0; i < B * Hk; ++i) {
      std::vector<int32_t> pages(static_cast<size_t>(P));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.begin() + std::min(P, 2 * K), rng);  // a hot set: hits happen
      std::swap(pages[0], pages[static_cast<size_t>(P - 1)]);    // the last page, straddling or past some pools
      const int64_t n = std::uniform_int_distribution<int64_t>(K / 2, K)(rng);
      std::sort(pages.begin(), pages.begin() + n);
      std::copy(pages.begin(), pages.begin() + n, sel.begin() + i * K);
    }
    std::vector<int32_t> plan(static_cast<size_t>(B * Hk * K * 2));
    const TensorView sel_v(sel.data(), DType::kI32, {B, Hk, K}), plan_v(plan.data(), DType::kI32, {B, Hk, K, 2});
    ops::page_cache_plan_rows(plan_v, sel_v, stacked(cpu.state(lanes * Hk, P, C)), rows, ps, step,
                              cpu.counter_view());
    ops::page_cache_fetch_rows(dst_k.host(), dst_v.host(), hk, hv, cache_k.host(), cache_v.host(), sel_v, plan_v,
                               rows);
    DeviceTensor d_sel(DType::kI32, {B, Hk, K}, sel), d_plan(DType::kI32, {B, Hk, K, 2});
    ops::page_cache_plan_rows(d_plan.view(), d_sel.view(), stacked(gpu.state()), rows, ps, step,
                              gpu.counters.view(), on());
    ops::page_cache_fetch_rows(dst_k.device(), dst_v.device(), hk, hv, cache_k.device(), cache_v.device(),
                               d_sel.view(), d_plan.view(), rows, on());
    ASSERT_EQ(d_plan.download<int32_t>(), plan) << "step " << step;
    ASSERT_EQ(gpu.page_slot.download<int32_t>(), cpu.page_slot) << "step " << step;
    ASSERT_EQ(gpu.slot_page.download<int32_t>(), cpu.slot_page) << "step " << step;
    ASSERT_EQ(gpu.hand.download<int32_t>(), cpu.hand) << "step " << step;
    dst_k.expect_same("dst_k", step);
    dst_v.expect_same("dst_v", step);
    cache_k.expect_same("cache_k", step);
    cache_v.expect_same("cache_v", step);
  }
  EXPECT_EQ(gpu.counters.download<int64_t>(), cpu.counters);
  EXPECT_GT(cpu.counters[0], 0) << "no hits: the test exercised nothing";
  EXPECT_GT(cpu.counters[1], 0);
}

// page_cache_store_scales writes the CPU's bytes into pinned host memory, from an odd start, leaving the rest.
TEST(CudaPageCache, StoreScalesMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(13);
  const int64_t Hk = 5, T = 1000, cap = 1301, start = 299;
  std::vector<float> src(static_cast<size_t>(T * Hk));
  for (float& x : src) x = static_cast<float>(rng() % 4093) / 8.0f;
  DeviceTensor d_src(DType::kF32, {T, Hk}, src);
  Buffer pinned(pinned_host_allocator(), DType::kF32, Shape{Hk, cap});
  std::vector<float> want(static_cast<size_t>(Hk * cap), -1.0f);
  std::copy(want.begin(), want.end(), pinned.view().data_as<float>());
  ops::page_cache_store_scales(TensorView(want.data(), DType::kF32, {Hk, cap}),
                               TensorView(src.data(), DType::kF32, {T, Hk}), start);
  ops::page_cache_store_scales(pinned.view(), d_src.view(), start, on());
  CUDA_CHECK(cudaDeviceSynchronize());
  const float* got = pinned.view().data_as<float>();
  EXPECT_TRUE(std::equal(want.begin(), want.end(), got));
  EXPECT_EQ(got[2 * cap + start + 7], src[7 * Hk + 2]);
}

TEST(CudaPageCache, BatchedRowsMatchCpuWithFp8Scales) {
  SKIP_WITHOUT_CUDA();
  check_rows(8, 128, 16, 24, 20, 11);  // the 4B shape's heads and page size
  check_rows(3, 64, 5, 9, 9, 12);      // odd heads and page size, a cache of exactly one selection
}

}  // namespace
}  // namespace nanovllm
