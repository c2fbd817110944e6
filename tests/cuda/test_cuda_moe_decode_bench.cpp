// A/B of the MoE decode fusion (kernels/cuda/moe_decode.cu) on the Qwen3-30B-A3B shape: E = 128 experts, k = 8,
// H = 2048, Im = 768, the sparse MLP alone (moe_mlp) of kLayers layers with their own weights (8 x 1.2 GB: the
// chosen experts come from HBM, not L2), captured into one CUDA graph per path and replayed. Prints the time
// per layer, the bytes a layer must read (the router and the chosen experts' weights), and the ratio to the
// floor at 4.25 TB/s; with bf16 experts, then block-scaled fp8 ones (moe_fp8.cu: a byte a weight). DISABLED_: a
// benchmark, run by scripts/bench/moe_decode_check.sh with --gtest_also_run_disabled_tests. DISABLED_GateUpKParts:
// the gate / up kernel alone at a tensor-parallel rank's shapes (Im / N for N = 1, 2, 4; fp8: N = 1, 2, whole
// blocks) for each count of warps sharing an item's K (moe_gate_up_decode's k_parts). MoeGemmBench.DISABLED_TiledRate:
// the experts' tiled GEMMs of long steps (wgmma vs mma.sync) at T = 256, 2048 and 8192.
#include "cuda_moe_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/moe_ops.h"

namespace nanovllm {
namespace {

using cuda_moe_test::DeviceMoeWorkspace;
using cuda_moe_test::ExpertDtype;
using cuda_test::DeviceTensor;
using cuda_test::random_bf16;

// Stacked experts [E, R, C] whose values do not matter to the time: bf16 0x3c3c (0.0115), or e4m3 0x3c (1.5) with
// block scales 1/128.
struct BenchExperts {
  DeviceTensor w, scale;
  BenchExperts(ExpertDtype dtype, int64_t E, int64_t R, int64_t C)
      : w(dtype == ExpertDtype::kFp8 ? DType::kF8E4M3 : DType::kBF16, Shape{E, R, C}),
        scale(DType::kF32, Shape{E, R / 128, C / 128},
              std::vector<float>(static_cast<size_t>(E * (R / 128) * (C / 128)), 1.0f / 128)),
        fp8(dtype == ExpertDtype::kFp8) {
    w.fill_bytes(0x3c);
  }
  TensorView view() const { return w.view(); }
  TensorView scale_view() const { return fp8 ? scale.view() : TensorView(); }
  bool fp8;
};

// Microseconds per layer of `launch_layers` (`layers` layers' launches), captured once into a CUDA graph on st and
// replayed `reps` times: the median.
template <class Fn>
double graph_us_per_layer(cudaStream_t st, int layers, int reps, Fn launch_layers) {
  const cudaGraphExec_t exec = cuda_test::warm_up_and_capture(st, launch_layers);
  const std::vector<float> ms = cuda_test::graph_replay_ms(exec, st, reps);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  return 1e3 * ms[ms.size() / 2] / layers;
}

// FusedVsUnfused with `dtype` experts.
void fused_vs_unfused(ExpertDtype dtype, cudaStream_t st, std::mt19937& rng) {
  constexpr int kLayers = 8, kReps = 30;
  constexpr double kHbmBytesPerSecond = 4.25e12;
  const int64_t E = 128, k = 8, H = 2048, Im = 768;
  struct Layer {
    DeviceTensor router;
    BenchExperts gate_up, down;
  };
  std::vector<Layer> layers;
  for (int l = 0; l < kLayers; ++l)
    layers.push_back({DeviceTensor(DType::kBF16, {E, H}, random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f).bits),
                      BenchExperts(dtype, E, 2 * Im, H), BenchExperts(dtype, E, H, Im)});
  const double weight_bytes = dtype == ExpertDtype::kFp8 ? 1.0 : 2.0;
  for (int64_t T : {1, 2, 4, 8, 16, 32}) {
    DeviceTensor x(DType::kBF16, {T, H}, random_bf16(static_cast<size_t>(T * H), rng).bits);
    DeviceTensor out(DType::kBF16, {T, H});
    const DeviceMoeWorkspace dws(T, E, k, H, Im);
    const ops::MoeWorkspace ws = dws.view();
    double us[2] = {};
    for (auto path : {cuda_ops::MoeDecodePath::kUnfused, cuda_ops::MoeDecodePath::kFused}) {
      us[path == cuda_ops::MoeDecodePath::kFused] = graph_us_per_layer(st, kLayers, kReps, [&] {
        // Every layer reads the same x (chaining them through constant expert weights would overflow to inf).
        for (const Layer& L : layers)
          cuda_ops::moe_mlp(out.view(), x.view(), L.router.view(),
                            {L.gate_up.view(), L.down.view(), L.gate_up.scale_view(), L.down.scale_view()}, true, ws,
                            cuda_test::on(st), path);
      });
    }
    // The bytes of one layer: the router and the distinct experts of the last step's routing.
    const std::vector<int32_t> chosen = dws.ids.download<int32_t>();
    const int64_t experts = static_cast<int64_t>(std::set<int32_t>(chosen.begin(), chosen.end()).size());
    const double bytes = 2.0 * static_cast<double>(E * H) + weight_bytes * static_cast<double>(experts * 3 * Im * H);
    const double floor_us = 1e6 * bytes / kHbmBytesPerSecond;
    std::printf("moe decode %s T=%2lld: unfused %7.2f us/layer (%.2fx floor), fused %7.2f us/layer (%.2fx floor); "
                "floor %.2f us (%lld experts, %.1f MB)\n",
                cuda_moe_test::dtype_name(dtype).c_str(), static_cast<long long>(T), us[0], us[0] / floor_us, us[1],
                us[1] / floor_us, floor_us, static_cast<long long>(experts), bytes / 1e6);
    const std::vector<float> y = out.download_f32();
    EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); })) << "T=" << T;
  }
}

TEST(MoeDecodeBench, DISABLED_FusedVsUnfused) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(21);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  for (ExpertDtype dtype : {ExpertDtype::kBf16, ExpertDtype::kFp8}) fused_vs_unfused(dtype, st, rng);
  CUDA_CHECK(cudaStreamDestroy(st));
}

// One rank's gate / up launch at TP N (the 30B-A3B shape, Im = 768 / N), for k_parts 2, 4 and 8 (fp8: 1, 2 and 4),
// then its down + combine launch: kLayers layers' launches in one graph each, on the routing of a random token batch (the router
// kernel, run once).
TEST(MoeDecodeBench, DISABLED_GateUpKParts) {
  SKIP_WITHOUT_CUDA();
  constexpr int kLayers = 16, kReps = 30;
  constexpr double kHbmBytesPerSecond = 4.25e12;
  const int64_t E = 128, k = 8, H = 2048;
  std::mt19937 rng(22);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  const std::vector<std::pair<ExpertDtype, int64_t>> runs = {
      {ExpertDtype::kBf16, 1}, {ExpertDtype::kBf16, 2}, {ExpertDtype::kBf16, 4},  // dtype, ranks
      {ExpertDtype::kFp8, 1}, {ExpertDtype::kFp8, 2}};  // fp8 at TP 4 (Im 192): the loader keeps the experts bf16
  for (auto [dtype, ranks] : runs) {
    const int64_t Im = 768 / ranks;
    const double weight_bytes = dtype == ExpertDtype::kFp8 ? 1.0 : 2.0;
    std::vector<BenchExperts> gate_up, down;
    for (int l = 0; l < kLayers; ++l) {
      gate_up.emplace_back(dtype, E, 2 * Im, H);
      down.emplace_back(dtype, E, H, Im);
    }
    DeviceTensor router(DType::kBF16, {E, H}, random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f).bits);
    for (int64_t T : {1, 2, 8}) {
      DeviceTensor x(DType::kBF16, {T, H}, random_bf16(static_cast<size_t>(T * H), rng).bits);
      DeviceTensor out(DType::kBF16, {T, H});
      const DeviceMoeWorkspace dws(T, E, k, H, Im);
      const ops::MoeWorkspace ws = dws.view();
      cuda_ops::moe_router_decode(x.view(), router.view(), ws, true, cuda_test::on(st));
      const std::vector<int32_t> chosen = dws.ids.download<int32_t>();
      const int64_t experts = static_cast<int64_t>(std::set<int32_t>(chosen.begin(), chosen.end()).size());
      const double floor_us =
          1e6 * weight_bytes * static_cast<double>(experts * 2 * Im * H) / kHbmBytesPerSecond;
      std::printf("gate_up %s TP%lld (Im %4lld) T=%2lld floor %5.2f us:", cuda_moe_test::dtype_name(dtype).c_str(),
                  static_cast<long long>(ranks), static_cast<long long>(Im), static_cast<long long>(T), floor_us);
      for (int parts : dtype == ExpertDtype::kFp8 ? std::vector<int>{1, 2, 4} : std::vector<int>{2, 4, 8}) {
        const double us = graph_us_per_layer(st, kLayers, kReps, [&] {
          for (const BenchExperts& w : gate_up)
            cuda_ops::moe_gate_up_decode(ws.act, x.view(), w.view(), w.scale_view(), ws.groups, cuda_test::on(st),
                                         parts);
        });
        std::printf("  k_parts %d %6.2f us", parts, us);
      }
      // The down projection + combine of the same rank (its bytes: the experts' down rows, Im each).
      const double us = graph_us_per_layer(st, kLayers, kReps, [&] {
        for (const BenchExperts& w : down)
          cuda_ops::moe_down_combine(out.view(), ws.act, w.view(), w.scale_view(), ws.topk_weights, ws.groups,
                                     cuda_test::on(st));
      });
      std::printf(" | down %6.2f us (floor %5.2f)\n", us, floor_us / 2);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

// The experts' grouped GEMMs of long steps (moe_experts' tiled kernels: wgmma, then mma.sync) on the 30B-A3B shape,
// bf16 and fp8 experts: T tokens routed by a random router (moe_mlp once), then moe_experts alone timed in a CUDA
// graph of kLayers launches with their own weights; TFLOP/s over the 6 P Im H FLOPs of its two GEMMs.
TEST(MoeGemmBench, DISABLED_TiledRate) {
  SKIP_WITHOUT_CUDA();
  constexpr int kLayers = 4, kReps = 10;
  const int64_t E = 128, k = 8, H = 2048, Im = 768;
  const cuda_test::RestoreOptions restore;
  std::mt19937 rng(23);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  DeviceTensor router(DType::kBF16, {E, H}, random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f).bits);
  for (ExpertDtype dtype : {ExpertDtype::kBf16, ExpertDtype::kFp8}) {
    std::vector<BenchExperts> gate_up, down;
    for (int l = 0; l < kLayers; ++l) {
      gate_up.emplace_back(dtype, E, 2 * Im, H);
      down.emplace_back(dtype, E, H, Im);
    }
    for (int64_t T : {256, 2048, 8192}) {
      DeviceTensor x(DType::kBF16, {T, H}, random_bf16(static_cast<size_t>(T * H), rng).bits);
      DeviceTensor out(DType::kBF16, {T, H});
      const DeviceMoeWorkspace dws(T, E, k, H, Im);
      const ops::MoeWorkspace ws = dws.view();
      cuda_ops::moe_mlp(out.view(), x.view(), router.view(),
                        {gate_up[0].view(), down[0].view(), gate_up[0].scale_view(), down[0].scale_view()}, true, ws,
                        cuda_test::on(st));
      const double flops = 6.0 * static_cast<double>(T * k * Im * H);
      std::printf("moe tiled %s T=%5lld:", cuda_moe_test::dtype_name(dtype).c_str(), static_cast<long long>(T));
      for (bool wgmma : {true, false}) {
        cuda_test::context().options.moe_gemm_wgmma = wgmma;
        const double us = graph_us_per_layer(st, kLayers, kReps, [&] {
          for (int l = 0; l < kLayers; ++l)
            cuda_ops::moe_experts(ws.rows, x.view(),
                                  {gate_up[l].view(), down[l].view(), gate_up[l].scale_view(), down[l].scale_view()},
                                  ws.groups, ws.act, cuda_test::on(st));
        });
        std::printf("  %s %8.1f us/layer %6.1f TFLOP/s", wgmma ? "wgmma" : "mma.sync", us, flops / us / 1e6);
      }
      std::printf("\n");
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace nanovllm
