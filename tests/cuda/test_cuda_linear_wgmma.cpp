// Hopper linear for decode-sized batches (linear_wgmma.cu) against the CPU reference linear on identical
// bf16 values: every launch shape the dispatch may time, token counts on and around the token tiles
// (1..257), K not a multiple of the 64-column chunk, N not a multiple of the 64-row tile, K splits over
// clusters, rings of 2 stages (each refilled many times); determinism; a PDL chain in a CUDA graph
// replayed with changing inputs; plus a DISABLED_ benchmark against gemv and cuBLASLt.
// Accuracy as in test_cuda_linear.cpp: bf16 products are exact in fp32, so the differences are the fp32
// summation order and the final output rounding. NMSE <= 1e-5 (bf16 out) / 1e-9 (f32 out); per element
// |err| <= 1e-2 rms(ref) + 5e-3 |ref| (bf16) or 1e-4 rms(ref) + 1e-5 |ref| (f32).
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "cuda_bench_util.h"
#include "cuda_test_util.h"

#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/gemv.cuh"
#include "nanovllm/kernels/cuda/linear_wgmma.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::linear_reference;
using cuda_test::random_bf16;
using cuda_ops::WgmmaLinearConfig;

#define SKIP_WITHOUT_WGMMA()                                                                \
  do {                                                                                      \
    SKIP_WITHOUT_CUDA();                                                                    \
    if (!cuda_ops::linear_wgmma_available(0)) GTEST_SKIP() << "no sm_90a device / build";   \
  } while (0)

std::string describe(int64_t T, int64_t N, int64_t K, DType out_t, const WgmmaLinearConfig& c) {
  return "T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " out=" +
         std::string(dtype_name(out_t)) + " tile=" + std::to_string(c.token_tile) + " wg=" + std::to_string(c.warpgroups) +
         " split=" + std::to_string(c.k_split) + " stages=" + std::to_string(c.stages) +
         " boxes=" + std::to_string(c.boxes) + " ctas=" + std::to_string(c.ctas);
}

// Runs every config on one random problem against the CPU reference; returns nothing, asserts.
void check_configs(int64_t T, int64_t N, int64_t K, DType out_t, const std::vector<WgmmaLinearConfig>& cfgs,
                   std::mt19937& rng) {
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(out_t, {T, N});
  ASSERT_TRUE(cuda_ops::linear_wgmma_supported(d_out.view(), d_x.view(), d_w.view()));
  const std::vector<float> ref = linear_reference(x.f32, w.f32, T, N, K);
  for (const WgmmaLinearConfig& c : cfgs) {
    d_out.fill_bytes(0xff);  // NaN poison: every element must be written
    cuda_ops::linear_wgmma(d_out.view(), d_x.view(), d_w.view(), {}, c);
    CUDA_CHECK(cudaGetLastError());
    cuda_test::expect_linear_close(d_out.download_f32(), ref, out_t == DType::kBF16, describe(T, N, K, out_t, c));
  }
}

// Every warpgroup count and K split, with a 2-stage ring and a deeper one (where it fits), 1 and 3 boxes per
// stage (3: stages whose last boxes lie past K), and unsplit grids of one CTA per row tile or 3 looping.
std::vector<WgmmaLinearConfig> all_shapes(int64_t T) {
  std::vector<WgmmaLinearConfig> out;
  const int nt = cuda_ops::linear_wgmma_token_tile(T);
  for (int wg : {1, 2})
    for (int ks : {1, 2, 4, 8})
      for (int boxes : {1, 3})
        for (int stages : {2, 5}) {
          if (stages * boxes * (wg * 64 + nt) * 128 > 200 * 1024) continue;  // over the shared memory
          out.push_back({nt, wg, ks, stages, boxes, 0});
          if (ks == 1) out.push_back({nt, wg, ks, stages, boxes, 3});
        }
  return out;
}

TEST(CudaLinearWgmma, EveryShapeMatchesReference) {
  SKIP_WITHOUT_WGMMA();
  std::mt19937 rng(31);
  for (int64_t T : {1, 7, 8, 9, 16, 17, 33, 64, 100, 129, 224, 256, 257}) {
    check_configs(T, 200, 1000, DType::kBF16, all_shapes(T), rng);  // 16 chunks, the last 40 columns
    check_configs(T, 64, 64, DType::kF32, all_shapes(T), rng);      // one chunk: splits without chunks
  }
}

TEST(CudaLinearWgmma, ModelShapesAndCandidates) {
  SKIP_WITHOUT_WGMMA();
  std::mt19937 rng(32);
  struct NK { int64_t N, K; DType out; };
  for (const NK& s : {NK{4096, 1024, DType::kBF16}, NK{1024, 3072, DType::kBF16}, NK{1000, 2048, DType::kF32},
                      NK{15, 4096, DType::kBF16}}) {
    for (int64_t T : {1, 16, 31, 128, 224}) {
      check_configs(T, s.N, s.K, s.out, cuda_ops::linear_wgmma_candidates(T, s.N, s.K, 0), rng);
      check_configs(T, s.N, s.K, s.out, cuda_ops::linear_wgmma_candidates(T, s.N, s.K, 0, true), rng);
    }
  }
}

TEST(CudaLinearWgmma, Deterministic) {
  SKIP_WITHOUT_WGMMA();
  std::mt19937 rng(33);
  const int64_t T = 37, N = 300, K = 2048;
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(DType::kF32, {T, N});
  for (const WgmmaLinearConfig& c : all_shapes(T)) {
    cuda_ops::linear_wgmma(d_out.view(), d_x.view(), d_w.view(), {}, c);
    const auto first = d_out.download<uint8_t>();
    d_out.fill_bytes(0);
    cuda_ops::linear_wgmma(d_out.view(), d_x.view(), d_w.view(), {}, c);
    EXPECT_EQ(first, d_out.download<uint8_t>()) << describe(T, N, K, DType::kF32, c);
  }
}

// Three dependent projections (cuda_test::expect_pdl_chain_sees_each_replays_inputs) in three launch
// shapes: a K split, a K split over clusters with 2-box stages, a persistent grid with 4-box stages. Each
// kernel's weight copies start before its wait; its token copies must see this replay's predecessor output.
TEST(CudaLinearWgmma, PdlChainInGraphSeesEachReplaysInputs) {
  SKIP_WITHOUT_WGMMA();
  std::mt19937 rng(34);
  const WgmmaLinearConfig shapes[] = {{32, 2, 2, 4, 1, 0}, {32, 1, 8, 3, 2, 0}, {32, 1, 1, 4, 4, 5}};
  cuda_test::expect_pdl_chain_sees_each_replays_inputs(
      24, 1024, {{2048, 0.5f}, {512, 0.05f}, {704, 0.1f}}, rng,
      [&](size_t i, TensorView out, TensorView in, TensorView w, cudaStream_t st) {
        cuda_ops::linear_wgmma(out, in, w, ops::Stream{st}, shapes[i]);
      });
}

// With linear_wgmma in its candidates, cuda_ops::linear times it against gemv / cuBLASLt at a shape's
// first use: whichever it keeps, the values stay right (batches on both sides of gemv's limit and the
// wgmma one).
TEST(CudaLinearWgmma, LinearDispatchKeepsTheValues) {
  SKIP_WITHOUT_WGMMA();
  struct Restore {
    bool was = cuda_ops::linear_wgmma_set_in_dispatch(true);
    ~Restore() {
      cuda_ops::linear_wgmma_set_in_dispatch(was);
      cuda_ops::linear_clear_choices();
    }
  } restore;
  cuda_ops::linear_clear_choices();
  std::mt19937 rng(35);
  for (int64_t T : {1, 16, 17, 64, 200, 256, 300}) {
    auto x = random_bf16(static_cast<size_t>(T * 1024), rng);
    auto w = random_bf16(static_cast<size_t>(1536 * 1024), rng, -0.5f, 0.5f);
    DeviceTensor d_x(DType::kBF16, {T, 1024}, x.bits), d_w(DType::kBF16, {1536, 1024}, w.bits),
        d_out(DType::kBF16, {T, 1536});
    const std::vector<float> ref = linear_reference(x.f32, w.f32, T, 1536, 1024);
    for (int call = 0; call < 2; ++call) {  // first call times the candidates, the second runs the pick
      d_out.fill_bytes(0xff);
      cuda_ops::linear(d_out.view(), d_x.view(), d_w.view(), TensorView(), {});
      cuda_test::expect_linear_close(d_out.download_f32(), ref, true, "linear T=" + std::to_string(T));
    }
  }
}

// Benchmark: per-launch us of the best wgmma shape against the best gemv shape (T <= 16) and cuBLASLt, as
// graph replays rotating over L2-cold weight copies (PDL on: back-to-back launches overlap as in a step).
TEST(CudaLinearWgmmaBench, DISABLED_Shapes) {
  SKIP_WITHOUT_WGMMA();
  std::mt19937 rng(9);
  const cuda_test::Shape3 shapes[] = {
      {"0.6B qkv", 4096, 1024, DType::kBF16},    {"0.6B o", 1024, 2048, DType::kBF16},
      {"0.6B gate_up", 6144, 1024, DType::kBF16}, {"0.6B down", 1024, 3072, DType::kBF16},
      {"8B qkv", 6144, 4096, DType::kBF16},       {"8B o", 4096, 4096, DType::kBF16},
      {"8B gate_up", 24576, 4096, DType::kBF16},  {"8B down", 4096, 12288, DType::kBF16},
      {"8B lm_head", 151936, 4096, DType::kF32},
  };
  std::printf("%-13s %3s | %8s %6s %-22s | %8s %6s | %8s %6s\n", "shape", "T", "wgmma us", "TB/s", "best shape",
              "gemv us", "TB/s", "cublas", "TB/s");
  for (const cuda_test::Shape3& sh : shapes) {
    const double wbytes = static_cast<double>(sh.N * sh.K * 2);
    const auto ws = cuda_test::weight_copies(sh, size_t{512} << 20, rng);
    const int copies = static_cast<int>(ws.size());
    for (int64_t T : {1, 4, 16, 32, 64, 128, 224, 256}) {
      if (sh.N > 100000 && T > 1) continue;
      auto x = random_bf16(static_cast<size_t>(T * sh.K), rng);
      DeviceTensor d_x(DType::kBF16, {T, sh.K}, x.bits), d_out(sh.out, {T, sh.N});
      const int launches = std::max(copies, 20);
      auto time = [&](auto&& run) {
        return cuda_test::graph_us_per_launch(launches, [&](int i, cudaStream_t s) {
          run(ws[static_cast<size_t>(i % copies)]->view(), ops::Stream{s});
        });
      };
      double wg_us = 1e30;
      std::string wg_desc;
      for (const WgmmaLinearConfig& c : cuda_ops::linear_wgmma_candidates(T, sh.N, sh.K, 0)) {
        const double us = time([&](TensorView w, ops::Stream s) { cuda_ops::linear_wgmma(d_out.view(), d_x.view(), w, s, c); });
        if (us < wg_us) {
          wg_us = us;
          wg_desc = "wg" + std::to_string(c.warpgroups) + " sp" + std::to_string(c.k_split) + " st" +
                    std::to_string(c.stages) + " bx" + std::to_string(c.boxes) + " c" + std::to_string(c.ctas);
        }
      }
      double gv_us = 1e30;
      if (T <= cuda_ops::kGemvMaxTokens)
        for (const cuda_ops::GemvConfig& c : cuda_ops::gemv_candidates(T, sh.N, sh.K, 0))
          gv_us = std::min(gv_us, time([&](TensorView w, ops::Stream s) {
                             cuda_ops::gemv(d_out.view(), d_x.view(), w, TensorView(), s, &c);
                           }));
      const double lt_us =
          time([&](TensorView w, ops::Stream s) { cuda_ops::linear_cublaslt(d_out.view(), d_x.view(), w, TensorView(), s); });
      std::printf("%-13s %3lld | %8.2f %6.2f %-22s | %8.2f %6.2f | %8.2f %6.2f\n", sh.name, static_cast<long long>(T),
                  wg_us, wbytes / (wg_us * 1e6), wg_desc.c_str(), gv_us < 1e29 ? gv_us : 0.0,
                  gv_us < 1e29 ? wbytes / (gv_us * 1e6) : 0.0, lt_us, wbytes / (lt_us * 1e6));
      std::fflush(stdout);
    }
  }
}

// For a profiler: 3 launches of one shape, NANOVLLM_WG_PROFILE="T N K tile wg split stages boxes ctas".
TEST(CudaLinearWgmmaBench, DISABLED_Profile) {
  SKIP_WITHOUT_WGMMA();
  const char* env = std::getenv("NANOVLLM_WG_PROFILE");
  if (env == nullptr) GTEST_SKIP() << "NANOVLLM_WG_PROFILE not set";
  long long T = 0, N = 0, K = 0;
  WgmmaLinearConfig c;
  ASSERT_EQ(std::sscanf(env, "%lld %lld %lld %d %d %d %d %d %d", &T, &N, &K, &c.token_tile, &c.warpgroups, &c.k_split,
                        &c.stages, &c.boxes, &c.ctas), 9);
  std::mt19937 rng(10);
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(DType::kBF16, {T, N});
  for (int i = 0; i < 3; ++i) cuda_ops::linear_wgmma(d_out.view(), d_x.view(), d_w.view(), {}, c);
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace nanovllm
