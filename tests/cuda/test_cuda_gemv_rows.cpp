// Row-stream gemv (gemv_rows.cu) against the CPU reference linear on identical bf16 values: every
// candidate shape, T 1-2, N below / above the CTA count, K 1024-12288 (rows spanning stages, several rows
// per stage); determinism; a PDL chain in a CUDA graph replayed with new inputs; plus a DISABLED_
// benchmark against the other gemv kernels and cuBLASLt. Tolerances as in test_cuda_gemv.cpp: NMSE <=
// 1e-5 (bf16 out) / 1e-9 (f32 out); per element |err| <= 1e-2 rms(ref) + 5e-3 |ref| (bf16) or 1e-4 rms(ref)
// + 1e-5 |ref| (f32).
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "cuda_bench_util.h"
#include "cuda_test_util.h"

#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/gemv.cuh"
#include "nanovllm/kernels/cuda/gemv_rows.h"

namespace nanovllm {
namespace {

using cuda_ops::GemvRowsConfig;
using cuda_test::DeviceTensor;
using cuda_test::linear_reference;
using cuda_test::random_bf16;

#define SKIP_WITHOUT_SM90()                                                                      \
  do {                                                                                           \
    SKIP_WITHOUT_CUDA();                                                                         \
    if (cuda_test::device_major() < 9) GTEST_SKIP() << "gemv_rows needs sm_90";                  \
  } while (0)

std::string describe(int64_t T, int64_t N, int64_t K, const GemvRowsConfig& c) {
  return "T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " ctas=" +
         std::to_string(c.ctas) + " stage=" + std::to_string(c.stage_bytes) + " stages=" + std::to_string(c.stages);
}

void check(int64_t T, int64_t N, int64_t K, DType out_t, std::vector<GemvRowsConfig> cfgs, std::mt19937& rng) {
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(out_t, {T, N});
  ASSERT_TRUE(cuda_ops::gemv_rows_supported(d_out.view(), d_x.view(), d_w.view()));
  const std::vector<float> ref = linear_reference(x.f32, w.f32, T, N, K);
  for (const GemvRowsConfig& c : cfgs) {
    d_out.fill_bytes(0xff);  // NaN poison: every element must be written
    cuda_ops::gemv_rows(d_out.view(), d_x.view(), d_w.view(), {}, c);
    CUDA_CHECK(cudaGetLastError());
    cuda_test::expect_linear_close(d_out.download_f32(), ref, out_t == DType::kBF16, describe(T, N, K, c));
  }
}

TEST(CudaGemvRows, MatchesReference) {
  SKIP_WITHOUT_SM90();
  std::mt19937 rng(41);
  for (int64_t T : {1, 2}) {
    // small rings (2 stages of 2 / 4 KB): many refills, rows spanning stages
    check(T, 37, 3072, DType::kBF16, {{5, 2048, 2}, {37, 4096, 3}, {3, 16384, 4}}, rng);
    check(T, 1000, 1024, DType::kF32, {{7, 2048, 2}, {132, 32768, 2}}, rng);  // several rows per stage
    for (auto [N, K] : {std::pair<int64_t, int64_t>{4096, 1024}, {1024, 3072}, {300, 12288}})
      check(T, N, K, DType::kBF16, cuda_ops::gemv_rows_candidates(T, N, K, 0), rng);
    check(T, 4096, 1024, DType::kBF16, cuda_ops::gemv_rows_candidates(T, 4096, 1024, 0, true), rng);
  }
}

TEST(CudaGemvRows, Deterministic) {
  SKIP_WITHOUT_SM90();
  std::mt19937 rng(42);
  const int64_t T = 2, N = 513, K = 2048;
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(DType::kF32, {T, N});
  for (const GemvRowsConfig& c : cuda_ops::gemv_rows_candidates(T, N, K, 0)) {
    cuda_ops::gemv_rows(d_out.view(), d_x.view(), d_w.view(), {}, c);
    const auto first = d_out.download<uint8_t>();
    d_out.fill_bytes(0);
    cuda_ops::gemv_rows(d_out.view(), d_x.view(), d_w.view(), {}, c);
    EXPECT_EQ(first, d_out.download<uint8_t>()) << describe(T, N, K, c);
  }
}

// A two-link chain (cuda_test::expect_pdl_chain_sees_each_replays_inputs): the second kernel's weight
// copies start before its wait, its reads of y must see this replay's y.
TEST(CudaGemvRows, PdlChainInGraphSeesEachReplaysInputs) {
  SKIP_WITHOUT_SM90();
  std::mt19937 rng(43);
  const GemvRowsConfig shapes[] = {{64, 16384, 3}, {100, 8192, 4}};
  cuda_test::expect_pdl_chain_sees_each_replays_inputs(
      2, 1024, {{2048, 0.5f}, {768, 0.05f}}, rng,
      [&](size_t i, TensorView out, TensorView in, TensorView w, cudaStream_t st) {
        cuda_ops::gemv_rows(out, in, w, ops::Stream{st}, shapes[i]);
      });
}

// With gemv_rows in its candidates, cuda_ops::linear keeps whichever kernel timed fastest: the values
// stay right (an LM-head-like f32 output and a projection).
TEST(CudaGemvRows, LinearDispatchKeepsTheValues) {
  SKIP_WITHOUT_SM90();
  struct Restore {
    bool was = cuda_ops::gemv_rows_set_in_dispatch(true);
    ~Restore() {
      cuda_ops::gemv_rows_set_in_dispatch(was);
      cuda_ops::linear_clear_choices();
    }
  } restore;
  cuda_ops::linear_clear_choices();
  std::mt19937 rng(44);
  for (int64_t T : {1, 2}) {
    for (auto [N, K, out_t] : {std::tuple<int64_t, int64_t, DType>{20000, 1024, DType::kF32},
                               {3072, 2048, DType::kBF16}}) {
      auto x = random_bf16(static_cast<size_t>(T * K), rng);
      auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
      DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(out_t, {T, N});
      const std::vector<float> ref = linear_reference(x.f32, w.f32, T, N, K);
      for (int call = 0; call < 2; ++call) {  // first call times the candidates, the second runs the pick
        d_out.fill_bytes(0xff);
        cuda_ops::linear(d_out.view(), d_x.view(), d_w.view(), TensorView(), {});
        cuda_test::expect_linear_close(d_out.download_f32(), ref, out_t == DType::kBF16, "linear T=" + std::to_string(T));
      }
    }
  }
}

// Benchmark: per-launch us of the best gemv_rows shape against the best of the other gemv kernels and
// cuBLASLt, graph replays rotating over L2-cold weight copies (PDL on).
TEST(CudaGemvRowsBench, DISABLED_Shapes) {
  SKIP_WITHOUT_SM90();
  std::mt19937 rng(11);
  const cuda_test::Shape3 shapes[] = {
      {"0.6B qkv", 4096, 1024, DType::kBF16},    {"0.6B o", 1024, 2048, DType::kBF16},
      {"0.6B gate_up", 6144, 1024, DType::kBF16}, {"0.6B down", 1024, 3072, DType::kBF16},
      {"0.6B lm_head", 151936, 1024, DType::kF32}, {"8B qkv", 6144, 4096, DType::kBF16},
      {"8B o", 4096, 4096, DType::kBF16},          {"8B gate_up", 24576, 4096, DType::kBF16},
      {"8B down", 4096, 12288, DType::kBF16},      {"8B lm_head", 151936, 4096, DType::kF32},
  };
  std::printf("%-13s %2s | %8s %6s %-18s | %8s %6s | %8s %6s\n", "shape", "T", "rows us", "TB/s", "best shape",
              "gemv us", "TB/s", "cublas", "TB/s");
  for (const cuda_test::Shape3& sh : shapes) {
    const double wbytes = static_cast<double>(sh.N * sh.K * 2);
    const auto ws = cuda_test::weight_copies(sh, size_t{512} << 20, rng);
    const int copies = static_cast<int>(ws.size());
    for (int64_t T : {1, 2}) {
      auto x = random_bf16(static_cast<size_t>(T * sh.K), rng);
      DeviceTensor d_x(DType::kBF16, {T, sh.K}, x.bits), d_out(sh.out, {T, sh.N});
      const int launches = std::max(copies, 20);
      auto time = [&](auto&& run) {
        return cuda_test::graph_us_per_launch(launches, [&](int i, cudaStream_t s) {
          run(ws[static_cast<size_t>(i % copies)]->view(), ops::Stream{s});
        });
      };
      double rows_us = 1e30;
      std::string desc;
      for (const GemvRowsConfig& c : cuda_ops::gemv_rows_candidates(T, sh.N, sh.K, 0)) {
        const double us = time([&](TensorView w, ops::Stream s) { cuda_ops::gemv_rows(d_out.view(), d_x.view(), w, s, c); });
        if (us < rows_us) {
          rows_us = us;
          desc = "c" + std::to_string(c.ctas) + " " + std::to_string(c.stage_bytes >> 10) + "K x" + std::to_string(c.stages);
        }
      }
      double gv_us = 1e30;
      for (const cuda_ops::GemvConfig& c : cuda_ops::gemv_candidates(T, sh.N, sh.K, 0))
        gv_us = std::min(gv_us, time([&](TensorView w, ops::Stream s) {
                           cuda_ops::gemv(d_out.view(), d_x.view(), w, TensorView(), s, &c);
                         }));
      const double lt_us =
          time([&](TensorView w, ops::Stream s) { cuda_ops::linear_cublaslt(d_out.view(), d_x.view(), w, TensorView(), s); });
      std::printf("%-13s %2lld | %8.2f %6.2f %-18s | %8.2f %6.2f | %8.2f %6.2f\n", sh.name, static_cast<long long>(T),
                  rows_us, wbytes / (rows_us * 1e6), desc.c_str(), gv_us, wbytes / (gv_us * 1e6), lt_us,
                  wbytes / (lt_us * 1e6));
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace nanovllm
