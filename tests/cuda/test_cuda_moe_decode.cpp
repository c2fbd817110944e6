// The MoE decode kernels (kernels/cuda/moe_decode.cu: router, gate / up, down + combine) against the CPU reference
// and the general CUDA path, on fresh random data: odd sizes (hidden sizes that leave a partial 16-column block, K
// tails of the 128-wide warp step), experts with no token, T = 1, 3, 9, 17 and the limit kMoeDecodeMaxTokens, E up
// to 512, ties in the router logits. Gate / up, down + combine and the whole fused MLP run with bf16 and with
// block-scaled fp8 experts (ExpertDtype: the fp8 kernels of moe_fp8.cu; shapes in whole 128 x 128 blocks with odd
// expert counts, experts without tokens, 512-column K steps left partial, token chunks, the 30B-A3B shape and its
// TP 2 rank's; the experts nobody picks hold NaN codes and scales: never read).
//
// Tolerances. Router logits: the kernel's fp32 dot product is rounded to bf16 like the reference's, in another
// summation order: one bf16 place, 1e-3 + 8e-3 relative. Routing and grouping of the kernel's own logits: equal
// to what moe_route + moe_group compute from them (ids, weights, offsets and active experts bit for bit; the rows
// inside an expert in any order), and the reference routing's weights within 1e-6 + 1e-5 relative. Gate / up:
// the reference rounds gate, up and the activation to bf16 as the kernel does; another fp32 sum order can move a
// rounded gate / up by one bf16 place: 2e-2 + 1e-2 relative, NMSE <= 1e-5. Down +
// combine: the reference rounds every expert row to bf16 (what moe_experts stores) and combines in fp32 in slot
// order as the kernel does; the kernel's expert rows can differ by one bf16 place (fp32 sum order), so per
// element 2e-2 + 1e-2 relative and NMSE <= 1e-5. fp8 experts: the reference multiplies code x scale in f32 (the CPU
// backend's values), which the fp8 kernels decode exactly: the same tolerances.
#include "cuda_moe_test_util.h"
#include "cuda_test_util.h"

#include <cmath>
#include <set>
#include <tuple>

#include "nanovllm/kernels/cpu/cpu_moe_ops.h"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/moe_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::expect_close;
using cuda_test::random_bf16;
using namespace cuda_moe_test;

std::string shape_name(int64_t T, int64_t E, int64_t k, int64_t H) {
  return "T=" + std::to_string(T) + " E=" + std::to_string(E) + " k=" + std::to_string(k) + " H=" + std::to_string(H);
}

// moe_router_decode on x, router: logits near the reference projection, routing and grouping identical to
// moe_route_group's on the kernel's own logits. Returns the kernel's ids.
std::vector<int32_t> check_router(const cuda_test::Bf16Data& x, const cuda_test::Bf16Data& router, int64_t T,
                                  int64_t E, int64_t k, int64_t H, bool renormalize, const std::string& what) {
  DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_router(DType::kBF16, {E, H}, router.bits);
  DeviceMoeWorkspace ws(T, E, k, H, 8);
  cuda_ops::moe_router_decode(d_x.view(), d_router.view(), ws.view(), renormalize, cuda_test::on());
  const std::vector<float> logits = ws.logits.download_f32();
  expect_close(logits, cuda_test::linear_reference(x.f32, router.f32, T, E, H), 1e-3f, 8e-3f, what + " logits");

  // The general kernels on the same logits.
  DeviceTensor d_logits(DType::kBF16, {T, E}, ws.logits.download<uint16_t>());
  DeviceMoeWorkspace want(T, E, k, H, 8);
  cuda_ops::moe_route_group(want.groups.view(), want.ids.view(), want.weights.view(), d_logits.view(), renormalize,
                            cuda_test::on());
  std::vector<int32_t> ids = ws.ids.download<int32_t>();
  EXPECT_EQ(ids, want.ids.download<int32_t>()) << what;
  EXPECT_EQ(ws.weights.download<uint32_t>(), want.weights.download<uint32_t>()) << what << " weights (bits)";
  HostGroups h(ids, T, k, E);
  expect_same_groups(ws.groups, h, what);

  // And the reference routing's weights.
  std::vector<float> logits_copy = logits, ref_w(static_cast<size_t>(T * k));
  std::vector<int32_t> ref_ids(static_cast<size_t>(T * k));
  cpu::moe_route(hv(ref_ids, {T, k}), hv(ref_w, {T, k}), hv(logits_copy, {T, E}), renormalize);
  expect_close(ws.weights.download<float>(), ref_w, 1e-6f, 1e-5f, what + " reference weights");
  return ids;
}

TEST(MoeDecode, RouterMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the decode router is a thread-block cluster (sm_90+)";
  std::mt19937 rng(11);
  for (auto [T, E, k, H] : {std::tuple{1, 128, 8, 2048}, {3, 13, 3, 200}, {32, 128, 8, 136}, {1, 512, 8, 64},
                            {17, 6, 6, 24}, {9, 60, 4, 4104}, {32, 512, 2, 8}}) {
    for (bool renormalize : {false, true}) {
      const std::string what = shape_name(T, E, k, H) + (renormalize ? " renorm" : "");
      const auto x = random_bf16(static_cast<size_t>(T * H), rng);
      const auto router = random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f);
      check_router(x, router, T, E, k, H, renormalize, what);
    }
  }
}

// Equal router rows give exactly equal logits: the lower expert comes first, as in moe_route.
TEST(MoeDecode, RouterTiesGoToTheLowerExpert) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the decode router is a thread-block cluster (sm_90+)";
  std::mt19937 rng(12);
  const int64_t T = 3, E = 40, k = 8, H = 264;
  const auto x = random_bf16(static_cast<size_t>(T * H), rng);
  auto router = random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f);
  // Experts 7, 20 and 33 copy expert 2's row; 30 copies 11's.
  auto copy_row = [&](int64_t to, int64_t from) {
    for (int64_t i = 0; i < H; ++i) {
      router.bits[static_cast<size_t>(to * H + i)] = router.bits[static_cast<size_t>(from * H + i)];
      router.f32[static_cast<size_t>(to * H + i)] = router.f32[static_cast<size_t>(from * H + i)];
    }
  };
  for (int64_t to : {7, 20, 33}) copy_row(to, 2);
  copy_row(30, 11);
  const std::vector<int32_t> ids = check_router(x, router, T, E, k, H, true, "ties");
  for (int64_t t = 0; t < T; ++t) {
    const auto first = ids.begin() + t * k, last = first + k;
    for (auto [lo, hi] : {std::pair{2, 7}, {7, 20}, {20, 33}, {11, 30}}) {
      const auto a = std::find(first, last, lo), b = std::find(first, last, hi);
      if (b != last) {
        EXPECT_TRUE(a != last && a < b) << "token " << t << ": expert " << hi << " without the tied " << lo
                                        << " before it";
      }
    }
  }
}

// moe_gate_up_decode on a random grouping against the CPU: gate / up = gate_up_w[e] @ x[token] rounded to bf16,
// act = silu(gate) * up rounded to bf16 (the values moe_experts stores in ws.act); for every k_parts.
void check_gate_up(ExpertDtype dtype, int64_t T, int64_t E, int64_t k, int64_t H, int64_t Im, int64_t used,
                   std::mt19937& rng) {
  const int64_t P = T * k;
  const std::string what = dtype_name(dtype) + " " + shape_name(T, E, k, H) + " Im=" + std::to_string(Im) +
                           " used=" + std::to_string(used);
  std::vector<int32_t> ids = random_ids(T, E, k, used, rng);
  HostGroups h(ids, T, k, E);
  const auto x = random_bf16(static_cast<size_t>(T * H), rng);
  const HostExperts gu = random_experts(dtype, E, 2 * Im, H, used, rng);
  DeviceTensor d_x(DType::kBF16, {T, H}, x.bits);
  const DeviceExperts d_gu(gu);
  DeviceTensor d_act(DType::kBF16, {P, Im});
  DeviceTensor d_off(DType::kI32, {E + 1}, h.offsets), d_sorted(DType::kI32, {P}, h.sorted);
  DeviceTensor d_rows(DType::kI32, {P}, h.rows), d_active(DType::kI32, {E}, h.active);
  const ops::MoeGroups g{d_off.view(), d_sorted.view(), d_rows.view(), d_active.view()};

  auto bf16_round = [](double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); };
  std::vector<float> ref(static_cast<size_t>(P * Im));
  for (int64_t e = 0; e < E; ++e)
    for (int32_t r = h.offsets[static_cast<size_t>(e)]; r < h.offsets[static_cast<size_t>(e) + 1]; ++r) {
      const int64_t t = h.sorted[static_cast<size_t>(r)] / k;
      for (int64_t c = 0; c < Im; ++c) {
        double gate = 0, up = 0;
        for (int64_t i = 0; i < H; ++i) {
          const double xv = x.f32[static_cast<size_t>(t * H + i)];
          gate += xv * gu.f32[static_cast<size_t>((e * 2 * Im + c) * H + i)];
          up += xv * gu.f32[static_cast<size_t>((e * 2 * Im + Im + c) * H + i)];
        }
        const double g_r = bf16_round(gate);
        ref[static_cast<size_t>(r * Im + c)] = bf16_round(g_r / (1.0 + std::exp(-g_r)) * bf16_round(up));
      }
    }
  // The kernel's pick, then each count of warps sharing an item's K.
  for (int parts : dtype == ExpertDtype::kFp8 ? std::vector<int>{0, 1, 2, 4} : std::vector<int>{0, 2, 4, 8}) {
    d_act.fill_bytes(0xff);
    cuda_ops::moe_gate_up_decode(d_act.view(), d_x.view(), d_gu.view(), d_gu.scale_view(), g, cuda_test::on(), parts);
    const std::vector<float> got = d_act.download_f32();
    const std::string named = what + " k_parts=" + std::to_string(parts);
    expect_close(got, ref, 2e-2f, 1e-2f, named);
    EXPECT_LE(cuda_test::nmse(got, ref), 1e-5) << named;
  }
}

TEST(MoeDecode, GateUpMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the decode router is a thread-block cluster (sm_90+)";
  std::mt19937 rng(15);
  // T, E, k, H, Im, experts used (the others get no token); then shapes in whole 128 x 128 blocks, for fp8 too
  for (auto [T, E, k, H, Im, used] : {std::tuple{1, 128, 8, 2048, 768, 128}, {3, 13, 3, 200, 72, 5},
                                      {9, 40, 4, 264, 136, 40}, {17, 6, 6, 40, 200, 6}, {32, 128, 8, 1032, 64, 17},
                                      {1, 4, 1, 8, 8, 2}, {32, 64, 32, 24, 16, 64},
                                      {1, 128, 8, 2048, 384, 128}, {2, 128, 8, 2048, 192, 128},  // TP 2 / 4 ranks
                                      {3, 13, 3, 256, 128, 5}, {9, 41, 4, 384, 256, 41}, {17, 7, 6, 640, 384, 7},
                                      {32, 128, 8, 1024, 128, 17}, {1, 4, 1, 128, 128, 2}, {32, 64, 32, 128, 128, 64},
                                      {2, 9, 2, 128, 256, 9}}) {
    check_gate_up(ExpertDtype::kBf16, T, E, k, H, Im, used, rng);
    if (fp8_shape(H, Im)) check_gate_up(ExpertDtype::kFp8, T, E, k, H, Im, used, rng);
  }
}

// moe_down_combine on a random grouping and activations against the CPU: rows = bf16(down_w[e] @ act[r]), then
// moe_combine.
void check_down_combine(ExpertDtype dtype, int64_t T, int64_t E, int64_t k, int64_t H, int64_t Im, int64_t used,
                        std::mt19937& rng) {
  const int64_t P = T * k;
  const std::string what = dtype_name(dtype) + " " + shape_name(T, E, k, H) + " Im=" + std::to_string(Im) +
                           " used=" + std::to_string(used);
  std::vector<int32_t> ids = random_ids(T, E, k, used, rng);
  HostGroups h(ids, T, k, E);
  const auto act = random_bf16(static_cast<size_t>(P * Im), rng);
  const HostExperts dw = random_experts(dtype, E, H, Im, used, rng);
  std::vector<float> w(static_cast<size_t>(T * k));
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (float& v : w) v = u(rng);
  DeviceTensor d_act(DType::kBF16, {P, Im}, act.bits);
  const DeviceExperts d_dw(dw);
  DeviceTensor d_w(DType::kF32, {T, k}, w), d_out(DType::kBF16, {T, H});
  DeviceTensor d_off(DType::kI32, {E + 1}, h.offsets), d_sorted(DType::kI32, {P}, h.sorted);
  DeviceTensor d_rows(DType::kI32, {P}, h.rows), d_active(DType::kI32, {E}, h.active);
  d_out.fill_bytes(0xff);
  const ops::MoeGroups g{d_off.view(), d_sorted.view(), d_rows.view(), d_active.view()};
  cuda_ops::moe_down_combine(d_out.view(), d_act.view(), d_dw.view(), d_dw.scale_view(), d_w.view(), g,
                             cuda_test::on());

  std::vector<float> rows(static_cast<size_t>(P * H)), ref(static_cast<size_t>(T * H));
  for (int64_t e = 0; e < E; ++e)
    for (int32_t r = h.offsets[static_cast<size_t>(e)]; r < h.offsets[static_cast<size_t>(e) + 1]; ++r)
      for (int64_t c = 0; c < H; ++c) {
        double s = 0;
        for (int64_t i = 0; i < Im; ++i)
          s += static_cast<double>(dw.f32[static_cast<size_t>((e * H + c) * Im + i)]) *
               act.f32[static_cast<size_t>(r * Im + i)];
        rows[static_cast<size_t>(r * H + c)] = bf16_to_f32(f32_to_bf16(static_cast<float>(s)));
      }
  cpu::moe_combine(hv(ref, {T, H}), hv(rows, {P, H}), hv(w, {T, k}), hv(h.rows, {P}));
  const std::vector<float> got = d_out.download_f32();
  expect_close(got, ref, 2e-2f, 1e-2f, what);
  EXPECT_LE(cuda_test::nmse(got, ref), 1e-5) << what;
}

TEST(MoeDecode, DownCombineMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the decode router is a thread-block cluster (sm_90+)";
  std::mt19937 rng(13);
  // T, E, k, H, Im, experts used (the others get no token); then shapes in whole 128 x 128 blocks, for fp8 too
  for (auto [T, E, k, H, Im, used] : {std::tuple{1, 128, 8, 2048, 768, 128}, {3, 13, 3, 200, 72, 5},
                                      {9, 40, 4, 264, 136, 40}, {17, 6, 6, 40, 200, 6}, {32, 128, 8, 104, 64, 17},
                                      {1, 4, 1, 8, 8, 2}, {32, 64, 32, 24, 16, 64},
                                      {1, 128, 8, 2048, 384, 128}, {3, 13, 3, 256, 128, 5}, {9, 41, 4, 384, 256, 41},
                                      {17, 7, 6, 128, 640, 7}, {32, 128, 8, 1024, 128, 17}, {1, 4, 1, 128, 128, 2},
                                      {32, 64, 32, 128, 128, 64}, {2, 9, 2, 256, 384, 9}}) {
    check_down_combine(ExpertDtype::kBf16, T, E, k, H, Im, used, rng);
    if (fp8_shape(H, Im)) check_down_combine(ExpertDtype::kFp8, T, E, k, H, Im, used, rng);
  }
}

// The whole sparse MLP, fused (default) and unfused, at decode sizes: every token the two paths route alike
// (their router projections may differ in a last bf16 place) gets outputs within the down kernels' tolerance,
// and the fused output matches the CPU ops fed with the fused path's routing.
TEST(MoeDecode, SparseMlpFusedMatchesUnfusedAndTheReference) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the decode router is a thread-block cluster (sm_90+)";
  std::mt19937 rng(14);
  // moe_mlp fuses one-token steps only (moe_mlp.cpp: its A/B); the kernels' own tests above cover larger T.
  for (ExpertDtype dtype : {ExpertDtype::kBf16, ExpertDtype::kFp8}) {
    const int64_t T = 1, E = 64, k = 8;
    const int64_t H = dtype == ExpertDtype::kFp8 ? 384 : 264, Im = dtype == ExpertDtype::kFp8 ? 128 : 72, P = T * k;
    const std::string what = dtype_name(dtype) + " T=" + std::to_string(T);
    const auto x = random_bf16(static_cast<size_t>(T * H), rng);
    const auto router = random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f);
    HostExperts gu = random_experts(dtype, E, 2 * Im, H, E, rng), dw = random_experts(dtype, E, H, Im, E, rng);
    DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_router(DType::kBF16, {E, H}, router.bits);
    const DeviceExperts d_gu(gu), d_dw(dw);
    DeviceTensor fused_out(DType::kBF16, {T, H}), unfused_out(DType::kBF16, {T, H});
    DeviceMoeWorkspace fused(T, E, k, H, Im), unfused(T, E, k, H, Im);
    cuda_ops::moe_mlp(fused_out.view(), d_x.view(), d_router.view(), expert_weights(d_gu, d_dw), true, fused.view(),
                      cuda_test::on(), cuda_ops::MoeDecodePath::kFused);
    cuda_ops::moe_mlp(unfused_out.view(), d_x.view(), d_router.view(), expert_weights(d_gu, d_dw), true,
                      unfused.view(), cuda_test::on(), cuda_ops::MoeDecodePath::kUnfused);
    const std::vector<float> a = fused_out.download_f32(), b = unfused_out.download_f32();
    std::vector<int32_t> ids = fused.ids.download<int32_t>();
    const std::vector<int32_t> ids_b = unfused.ids.download<int32_t>();
    int64_t same = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!std::equal(ids.begin() + t * k, ids.begin() + (t + 1) * k, ids_b.begin() + t * k)) continue;
      ++same;
      const std::vector<float> ra(a.begin() + t * H, a.begin() + (t + 1) * H);
      const std::vector<float> rb(b.begin() + t * H, b.begin() + (t + 1) * H);
      expect_close(ra, rb, 2e-2f, 1e-2f, what + " token " + std::to_string(t) + " fused vs unfused");
    }
    EXPECT_GE(same, (T + 1) / 2) << what << ": the two paths route most tokens alike";
    // The CPU ops on the fused path's routing.
    std::vector<float> w = fused.weights.download<float>();
    std::vector<float> rows(static_cast<size_t>(P * H)), ref(static_cast<size_t>(T * H));
    std::vector<uint16_t> act(static_cast<size_t>(P * Im));
    std::vector<float> xf = x.f32, &guf = gu.f32, &dwf = dw.f32;
    HostGroups h(ids, T, k, E);
    cpu::moe_experts(hv(rows, {P, H}), hv(xf, {T, H}), hv(guf, {E, 2 * Im, H}), hv(dwf, {E, H, Im}), h.view(),
                     hv(act, {P, Im}));
    cpu::moe_combine(hv(ref, {T, H}), hv(rows, {P, H}), hv(w, {T, k}), hv(h.rows, {P}));
    expect_close(a, ref, 2e-2f, 1e-2f, what + " fused vs the CPU");
  }
}

TEST(MoeDecode, OutOfRangeStepsAreClearErrors) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the decode router is a thread-block cluster (sm_90+)";
  const int64_t T = cuda_ops::kMoeDecodeMaxTokens + 1, E = 8, k = 2, H = 16, Im = 8;
  DeviceTensor d_out(DType::kBF16, {T, H}), d_act(DType::kBF16, {T * k, Im}), d_dw(DType::kBF16, {E, H, Im});
  DeviceTensor d_w(DType::kF32, {T, k});
  DeviceGroups g(T * k, E);
  try {
    cuda_ops::moe_down_combine(d_out.view(), d_act.view(), d_dw.view(), TensorView(), d_w.view(), g.view(),
                               cuda_test::on());
    ADD_FAILURE() << "no error for T = " << T;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
