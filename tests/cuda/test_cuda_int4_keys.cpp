// The keyscore policy's CUDA kernels against their CPU references (kernels/sparse_ops.h) on the same data:
// int4_keys_update bit for bit (bf16 and fp8 caches, a prefill then decode steps, a -1 slot), int4_key_scores within
// fp32 summation tolerance (head_dim 32 to 256 -- every word count per lane of the tensor-core kernel's loads: 1, 2, 3,
// 4, 6, 8 --, GQA groups 1 to 20 -- one, two and three passes of 8 heads per MMA --, block sizes 4, 8, 16, 24, 32, 40
// and 64 -- 16-key tiles inside a page, across pages and across page boundaries --, partial pages, a context past
// one CTA's keys). And the bench of one layer's scores at 128K and at 8 x 32K beside Quest's (DISABLED_: run with
// --gtest_also_run_disabled_tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::on;

struct Setting {
  int64_t d, hq, hk, bs;
  bool fp8;
};

void check_int4_keys(const Setting& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.d * 31 + c.hq * 7 + c.bs + c.fp8));
  const std::vector<int32_t> ctx = {150, 7, 33, 64, 4805};  // 4805 keys: past one score CTA's 2048
  const int64_t S = static_cast<int64_t>(ctx.size()), D = c.d, Hk = c.hk, Hq = c.hq, BS = c.bs;
  int64_t NB = 3, MB = 0;
  for (int32_t x : ctx) {
    NB += (x + BS - 1) / BS;
    MB = std::max(MB, (x + BS - 1) / BS);
  }
  std::vector<int32_t> ids(static_cast<size_t>(NB)), bt(static_cast<size_t>(S * MB), -1);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t p = 0; p < (ctx[static_cast<size_t>(s)] + BS - 1) / BS; ++p)
      bt[static_cast<size_t>(s * MB + p)] = ids[next++];
  const Shape cache_shape{NB, BS, Hk, D}, rows{NB, BS, Hk};
  // The cache: bf16 values, or fp8 codes (no NaN codes) with per-row scales.
  cuda_test::Bf16Data kbf = cuda_test::random_bf16(static_cast<size_t>(cache_shape.numel()), rng, -2.0f, 2.0f);
  std::vector<uint8_t> k8(static_cast<size_t>(cache_shape.numel()));
  std::vector<float> k8_scale(static_cast<size_t>(rows.numel()));
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> mag(0.001f, 0.05f);
  for (auto& b : k8) {
    b = static_cast<uint8_t>(code(rng));
    if ((b & 0x7f) == 0x7f) b ^= 1;  // 0x7f / 0xff are e4m3's NaNs
  }
  for (auto& x : k8_scale) x = mag(rng);
  const KvCacheTensor host_cache =
      c.fp8 ? KvCacheTensor(TensorView(k8.data(), DType::kF8E4M3, cache_shape),
                            cuda_test::host_view(k8_scale, rows))
            : KvCacheTensor(TensorView(kbf.bits.data(), DType::kBF16, cache_shape));
  const DeviceTensor dk = c.fp8 ? DeviceTensor(DType::kF8E4M3, cache_shape, k8)
                                : DeviceTensor(DType::kBF16, cache_shape, kbf.bits);
  const DeviceTensor dks(DType::kF32, rows, k8_scale);
  const KvCacheTensor dev_cache = c.fp8 ? KvCacheTensor(dk.view(), dks.view()) : KvCacheTensor(dk.view());

  // Step 1: every position but the last two of each sequence, one -1 slot; steps 2 and 3: one token each.
  std::vector<std::vector<int32_t>> steps(3);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = ctx[static_cast<size_t>(s)];
    for (int64_t pos = 0; pos < n; ++pos) {
      const int32_t slot =
          bt[static_cast<size_t>(s * MB + pos / BS)] * static_cast<int32_t>(BS) + static_cast<int32_t>(pos % BS);
      steps[pos < n - 2 ? 0 : static_cast<size_t>(pos - (n - 2) + 1)].push_back(slot);
    }
  }
  steps[0].insert(steps[0].begin() + 3, -1);
  const Shape code_shape{NB, Hk, BS, D / 2};
  std::vector<uint8_t> cpu_codes(static_cast<size_t>(code_shape.numel()), 0);
  std::vector<float> cpu_scales(static_cast<size_t>(rows.numel()), 0.0f);
  DeviceTensor codes(DType::kU8, code_shape), scales(DType::kF32, {NB, Hk, BS});
  codes.fill_bytes(0);
  scales.fill_bytes(0);
  const TensorView host_codes(cpu_codes.data(), DType::kU8, code_shape);
  const TensorView host_scales = cuda_test::host_view(cpu_scales, {NB, Hk, BS});
  for (auto& step : steps) {
    const int64_t T = static_cast<int64_t>(step.size());
    ops::int4_keys_update(host_codes, host_scales, host_cache, cuda_test::host_view(step, {T}));
    DeviceTensor slots(DType::kI32, {T}, step);
    ops::int4_keys_update(codes.view(), scales.view(), dev_cache, slots.view(), on());
  }
  EXPECT_EQ(codes.download<uint8_t>(), cpu_codes);
  EXPECT_EQ(scales.download<float>(), cpu_scales);

  // Scores from those codes: within fp32 summation error of the CPU's.
  const int64_t MP = MB + 3;
  cuda_test::Bf16Data qd = cuda_test::random_bf16(static_cast<size_t>(S * Hq * D), rng);
  std::vector<float> cpu_scores(static_cast<size_t>(S * Hk * MP));
  std::vector<int32_t> ctx_v = ctx;
  DeviceTensor q(DType::kBF16, {S, Hq, D}, qd.bits), dbt(DType::kI32, {S, MB}, bt), dctx(DType::kI32, {S}, ctx_v),
      scores(DType::kF32, {S, Hk, MP});
  ops::int4_key_scores(cuda_test::host_view(cpu_scores, {S, Hk, MP}),
                       TensorView(qd.bits.data(), DType::kBF16, {S, Hq, D}), host_codes, host_scales,
                       cuda_test::host_view(bt, {S, MB}), cuda_test::host_view(ctx_v, {S}), BS);
  ops::int4_key_scores(scores.view(), q.view(), codes.view(), scales.view(), dbt.view(), dctx.view(), BS, on());
  const std::vector<float> got = scores.download<float>();
  int64_t finite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(cpu_scores[i])) {
      EXPECT_EQ(got[i], cpu_scores[i]) << i;
    } else {
      EXPECT_NEAR(got[i], cpu_scores[i], 1e-4f * (1.0f + std::fabs(cpu_scores[i]))) << i;
      ++finite;
    }
  }
  EXPECT_GT(finite, 0);
}

TEST(CudaInt4Keys, UpdateIsBitIdenticalAndScoresMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  const Setting settings[] = {{128, 32, 8, 16, false}, {128, 32, 8, 16, true},  {64, 8, 2, 8, false},
                              {256, 8, 2, 32, false},  {128, 6, 3, 24, false},  {128, 16, 1, 64, true},
                              {64, 20, 1, 16, false},  {128, 4, 4, 16, false}, {32, 9, 1, 4, false},
                              {96, 12, 4, 16, false},  {192, 8, 8, 40, true}};
  for (const Setting& c : settings) {
    SCOPED_TRACE("head_dim " + std::to_string(c.d) + ", heads " + std::to_string(c.hq) + " / " +
                 std::to_string(c.hk) + ", block " + std::to_string(c.bs) + (c.fp8 ? ", fp8" : ", bf16"));
    check_int4_keys(c);
  }
}

// One layer's page scores, Qwen3-4B heads (Hq 32, Hk 8, D 128), pages of 16: keyscore against Quest (graph replay
// medians), for S sequences of ctx keys. Bytes read: keyscore Hk x S ctx x (64 + 4); Quest 2 x S ctx / 16 x 8 x 256 B.
void bench_scores(int64_t S, int64_t ctx) {
  const int64_t Hq = 32, Hk = 8, D = 128, BS = 16, pages = ctx / BS, NB = S * pages;
  std::mt19937 rng(3);
  std::vector<uint8_t> codes_h(static_cast<size_t>(NB * Hk * BS * D / 2));
  for (auto& b : codes_h) b = static_cast<uint8_t>(rng());
  std::vector<float> scales_h(static_cast<size_t>(NB * Hk * BS), 0.01f);
  cuda_test::Bf16Data qd = cuda_test::random_bf16(static_cast<size_t>(S * Hq * D), rng);
  cuda_test::Bf16Data mm = cuda_test::random_bf16(static_cast<size_t>(NB * Hk * D), rng);
  std::vector<int32_t> bt(static_cast<size_t>(NB)), c(static_cast<size_t>(S), static_cast<int32_t>(ctx));
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), rng);
  DeviceTensor codes(DType::kU8, {NB, Hk, BS, D / 2}, codes_h), scales(DType::kF32, {NB, Hk, BS}, scales_h),
      q(DType::kBF16, {S, Hq, D}, qd.bits), k_min(DType::kBF16, {NB, Hk, D}, mm.bits),
      k_max(DType::kBF16, {NB, Hk, D}, mm.bits), block_tables(DType::kI32, {S, pages}, bt),
      context(DType::kI32, {S}, c), scores(DType::kF32, {S, Hk, pages});
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const auto median_us = [&](auto&& body) { return cuda_test::graph_median_us(st, body); };
  const double keyscore = median_us([&] {
    ops::int4_key_scores(scores.view(), q.view(), codes.view(), scales.view(), block_tables.view(), context.view(), BS,
                         on(st));
  });
  const double quest = median_us([&] {
    ops::quest_scores(scores.view(), q.view(), k_min.view(), k_max.view(), block_tables.view(), context.view(), BS,
                      on(st));
  });
  const double mb = static_cast<double>(Hk * S * ctx * (D / 2 + 4)) / 1e6;
  const double quest_mb = static_cast<double>(2 * NB * Hk * D * 2) / 1e6;
  std::printf("%lld x %lld keys, Hq 32 / Hk 8 / D 128, pages of 16, one layer:\n", static_cast<long long>(S),
              static_cast<long long>(ctx));
  std::printf("  int4_key_scores %8.1f us (%.0f MB: %.0f GB/s)\n", keyscore, mb, mb / 1e3 / (keyscore * 1e-6));
  std::printf("  quest_scores    %8.1f us (%.0f MB: %.0f GB/s)\n", quest, quest_mb, quest_mb / 1e3 / (quest * 1e-6));
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaInt4KeysBench, DISABLED_Scores128K) {
  SKIP_WITHOUT_CUDA();
  bench_scores(1, 131072);  // one 128K sequence
  bench_scores(8, 32768);   // the 8 x 32K decode step of the 4B shape
}

}  // namespace
}  // namespace nanovllm
