// CUDA mixture-of-experts ops against the CPU reference (kernels/cpu/moe.cpp) on fresh random data: routing
// (fp32 and bf16 logits, E up to 512, k up to 8, single- and multi-CTA paths), grouping (experts with no pair,
// more pairs than a CTA has threads), the experts' grouped GEMMs on both kernels (the weight-streaming one for
// T <= 32 with one and two 8-token tiles, the tiled one beyond: odd intermediate sizes, K tails, several row
// tiles per expert, the Qwen3-30B-A3B shape), the combine, and the whole sparse MLP — eagerly and replayed from a
// CUDA graph captured under another routing. The expert tests run with bf16 and with block-scaled fp8 experts
// (ExpertDtype; fp8 on the shapes in whole 128 x 128 blocks, with odd expert counts, experts without tokens, 512-
// column K steps left partial, token chunks; the experts nobody picks hold NaN codes and scales: never read).
//
// Tolerances. Routing: ids exact (continuous random logits have no ties; equal ones go to the lower id),
// weights within 1e-6 + 1e-5 relative (fp32 exp and sum orders). Expert rows: the reference rounds gate, up and
// the activation to bf16 as the kernels do; the GPU sums in another order, which can move a rounded gate / up
// by one bf16 ulp, and rounds its output to bf16: per element 2e-2 + 1e-2 relative, NMSE <= 1e-5. fp8 experts:
// the reference's weights are code x scale in f32 (the CPU backend's), which the weight-streaming kernels multiply
// exactly (same tolerances; the codes' exact values on tensor cores, the scale per block after); the tiled kernel
// converts its weight tiles to bf16(code x scale), so past 32 tokens
// the reference takes those bf16 values (same tolerances) and the rows must equal, bit for bit, the bf16 kernel's
// on those weights. Combine: one bf16 rounding, 1e-2 + 5e-3 relative.
#include "cuda_moe_test_util.h"
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
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

TEST(CudaMoe, RouteMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(1);
  for (auto [T, E, k] : {std::tuple{1, 8, 2}, {7, 13, 3}, {300, 128, 8}, {33, 512, 8}, {5, 128, 1}, {3, 6, 6}}) {
    for (bool renormalize : {false, true}) {
      const std::string what = "T=" + std::to_string(T) + " E=" + std::to_string(E) + " k=" + std::to_string(k) +
                               (renormalize ? " renorm" : "");
      std::vector<float> logits(static_cast<size_t>(T * E));
      std::normal_distribution<float> n01(0.f, 2.f);
      for (float& l : logits) l = n01(rng);
      DeviceTensor d_logits(DType::kF32, {T, E}, logits), d_ids(DType::kI32, {T, k}), d_w(DType::kF32, {T, k});
      d_w.fill_bytes(0xff);
      cuda_ops::moe_route(d_ids.view(), d_w.view(), d_logits.view(), renormalize, cuda_test::on());
      std::vector<int32_t> ids(static_cast<size_t>(T * k));
      std::vector<float> w(static_cast<size_t>(T * k));
      cpu::moe_route(hv(ids, {T, k}), hv(w, {T, k}), hv(logits, {T, E}), renormalize);
      EXPECT_EQ(d_ids.download<int32_t>(), ids) << what;
      expect_close(d_w.download_f32(), w, 1e-6f, 1e-5f, what);
    }
  }
}

TEST(CudaMoe, RouteBreaksTiesTowardsTheLowerExpert) {
  SKIP_WITHOUT_CUDA();
  // Experts 1, 3 and 6 share the largest logit, 0 and 7 the next.
  std::vector<float> logits = {1.f, 2.f, 0.f, 2.f, -1.f, 0.5f, 2.f, 1.f};
  DeviceTensor d_logits(DType::kF32, {1, 8}, logits), d_ids(DType::kI32, {1, 5}), d_w(DType::kF32, {1, 5});
  cuda_ops::moe_route(d_ids.view(), d_w.view(), d_logits.view(), false, cuda_test::on());
  EXPECT_EQ(d_ids.download<int32_t>(), (std::vector<int32_t>{1, 3, 6, 0, 7}));
}

TEST(CudaMoe, GroupMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(2);
  for (auto [T, E, k, used] : {std::tuple{1, 8, 2, 8}, {5, 128, 8, 40}, {256, 128, 8, 100}, {257, 128, 8, 128},
                               {1000, 512, 4, 300}, {4096, 128, 8, 128}}) {
    const std::string what = "T=" + std::to_string(T) + " E=" + std::to_string(E);
    std::vector<int32_t> ids = random_ids(T, E, k, used, rng);
    HostGroups h(ids, T, k, E);
    DeviceTensor d_ids(DType::kI32, {T, k}, ids);
    DeviceGroups d(T * k, E);
    cuda_ops::moe_group(d.view(), d_ids.view(), cuda_test::on());
    expect_same_groups(d, h, what + " group");
    // The fused routing + grouping of decode-sized steps (and its two-launch fallback past 256 tokens), on
    // logits that route exactly like `ids` (each chosen expert far above the rest, in slot order).
    std::vector<float> logits(static_cast<size_t>(T * E), 0.f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) logits[static_cast<size_t>(t * E + ids[static_cast<size_t>(t * k + j)])] = 40.f - j;
    DeviceTensor d_logits(DType::kF32, {T, E}, logits), d_ids2(DType::kI32, {T, k}), d_w(DType::kF32, {T, k});
    DeviceGroups d2(T * k, E);
    cuda_ops::moe_route_group(d2.view(), d_ids2.view(), d_w.view(), d_logits.view(), true, cuda_test::on());
    EXPECT_EQ(d_ids2.download<int32_t>(), ids) << what;
    expect_same_groups(d2, h, what + " route_group");
  }
}

// Where two [P, C] results (pair order) differ: beyond atol + rtol |want| (or bitwise when atol < 0), as
// "pair p (token, slot, expert e, device row r = local row l of e, row tile l / 128, warp half l % 128 / 64):
// columns [a, b) ..." for the first pairs, and per column the pairs it fails in. What a device run needs to tell a
// race (varies between runs, scattered) from a tile-shaped fault (one row x one column tile, 64 rows x one column).
void describe_mismatch(const std::vector<float>& got, const std::vector<float>& want, int64_t P, int64_t C,
                       int64_t k, const std::vector<int32_t>& ids, const std::vector<int32_t>& pair_rows,
                       const std::vector<int32_t>& offsets, float atol, float rtol, const std::string& what) {
  auto off = [&](size_t i) {
    return atol < 0 ? (got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i])))
                    : !(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
  };
  std::map<int64_t, std::vector<int64_t>> by_col;
  int64_t bad = 0, shown = 0;
  for (int64_t p = 0; p < P; ++p) {
    std::string cols;
    int64_t n = 0;
    for (int64_t c = 0; c < C; ++c) {
      if (!off(static_cast<size_t>(p * C + c))) continue;
      int64_t c1 = c;
      while (c1 + 1 < C && off(static_cast<size_t>(p * C + c1 + 1))) ++c1;
      for (int64_t i = c; i <= c1; ++i) by_col[i].push_back(p);
      n += c1 - c + 1;
      if (cols.size() < 400) cols += " [" + std::to_string(c) + ", " + std::to_string(c1 + 1) + ")";
      c = c1;
    }
    if (n == 0) continue;
    bad += n;
    if (shown++ >= 24) continue;
    const int32_t e = ids[static_cast<size_t>(p)], r = pair_rows[static_cast<size_t>(p)];
    const int32_t l = r - offsets[static_cast<size_t>(e)];
    const size_t i0 = static_cast<size_t>(p * C + std::stol(cols.substr(2)));
    ADD_FAILURE() << what << ": pair " << p << " (token " << p / k << ", slot " << p % k << ", expert " << e
                  << ", device row " << r << " = local row " << l << ", row tile " << l / 128 << ", warp half "
                  << l % 128 / 64 << "): " << n << " columns:" << cols << "; first got " << got[i0] << " want "
                  << want[i0];
  }
  if (bad == 0) return;
  std::string cols;
  for (const auto& [c, ps] : by_col) {
    if (cols.size() > 1500) break;
    cols += " " + std::to_string(c) + "(" + std::to_string(ps.size()) + " pairs)";
  }
  ADD_FAILURE() << what << ": " << bad << " elements in " << shown << " pairs differ; by column:" << cols;
}

// The experts' rows of a random routing on the GPU against cpu::moe_experts with bf16 activations.
void check_experts(ExpertDtype dtype, int64_t T, int64_t E, int64_t k, int64_t H, int64_t Im, int64_t used,
                   std::mt19937& rng) {
  const std::string what = dtype_name(dtype) + " T=" + std::to_string(T) + " E=" + std::to_string(E) + " k=" +
                           std::to_string(k) + " H=" + std::to_string(H) + " Im=" + std::to_string(Im);
  const int64_t P = T * k;
  auto x = random_bf16(static_cast<size_t>(T * H), rng);
  // Random weights for the experts that get rows (cheap to make at 30B shapes).
  HostExperts gu = random_experts(dtype, E, 2 * Im, H, used, rng), dw = random_experts(dtype, E, H, Im, used, rng);
  // fp8 past the weight-streaming kernels: the tiled kernel's bf16 tiles.
  const bool tiled_fp8 = dtype == ExpertDtype::kFp8 && T > cuda_ops::kMoeGemvMaxTokens;
  cuda_test::Bf16Data gu_bf16, dw_bf16;
  if (tiled_fp8) {
    gu_bf16 = bf16_values(gu);
    dw_bf16 = bf16_values(dw);
  }
  std::vector<float>& gu_ref = tiled_fp8 ? gu_bf16.f32 : gu.f32;
  std::vector<float>& dw_ref = tiled_fp8 ? dw_bf16.f32 : dw.f32;
  std::vector<int32_t> ids = random_ids(T, E, k, used, rng);
  HostGroups h(ids, T, k, E);
  std::vector<float> ref(static_cast<size_t>(P * H));
  std::vector<uint16_t> act_ref(static_cast<size_t>(P * Im));
  cpu::moe_experts(hv(ref, {P, H}), hv(x.f32, {T, H}), hv(gu_ref, {E, 2 * Im, H}), hv(dw_ref, {E, H, Im}), h.view(),
                   hv(act_ref, {P, Im}));

  DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_ids(DType::kI32, {T, k}, ids);
  const DeviceExperts d_gu(gu), d_dw(dw);
  DeviceTensor d_rows(DType::kBF16, {P, H}), d_act(DType::kBF16, {P, Im});
  d_rows.fill_bytes(0xff);  // NaN poison: every row must be written
  DeviceGroups d(P, E);
  cuda_ops::moe_group(d.view(), d_ids.view(), cuda_test::on());
  cuda_ops::moe_experts(d_rows.view(), d_x.view(), expert_weights(d_gu, d_dw), d.view(), d_act.view(),
                        cuda_test::on());
  // Rows sit where the device grouping put their pairs: compare pair by pair.
  const auto rows = d_rows.download_f32();
  const auto pair_rows = d.rows.download<int32_t>();
  std::vector<float> got(static_cast<size_t>(P * H)), want(static_cast<size_t>(P * H));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < H; ++c) {
      got[static_cast<size_t>(p * H + c)] = rows[static_cast<size_t>(pair_rows[static_cast<size_t>(p)] * H + c)];
      want[static_cast<size_t>(p * H + c)] = ref[static_cast<size_t>(h.rows[static_cast<size_t>(p)] * H + c)];
    }
  const auto d_offsets = d.offsets.download<int32_t>();
  describe_mismatch(got, want, P, H, k, ids, pair_rows, d_offsets, 2e-2f, 1e-2f, what + " rows");
  EXPECT_LE(cuda_test::nmse(got, want), 1e-5) << what;
  if (!tiled_fp8) return;
  // Pair order of a [P, C] device result.
  auto by_pair = [&](const std::vector<float>& v, int64_t C) {
    std::vector<float> o(static_cast<size_t>(P * C));
    for (int64_t p = 0; p < P; ++p)
      std::copy_n(v.begin() + pair_rows[static_cast<size_t>(p)] * C, C, o.begin() + p * C);
    return o;
  };
  // Stage 1 alone: the activations against the CPU's (which rounds gate, up and act as the kernels do).
  std::vector<float> act_want(static_cast<size_t>(P * Im));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < Im; ++c)
      act_want[static_cast<size_t>(p * Im + c)] =
          bf16_to_f32(act_ref[static_cast<size_t>(h.rows[static_cast<size_t>(p)] * Im + c)]);
  const std::vector<float> act_got = by_pair(d_act.download_f32(), Im);
  describe_mismatch(act_got, act_want, P, Im, k, ids, pair_rows, d_offsets, 2e-2f, 1e-2f, what + " act");
  // A second run on the same inputs: a race shows as a difference between runs.
  DeviceTensor r_rows(DType::kBF16, {P, H}), r_act(DType::kBF16, {P, Im});
  r_rows.fill_bytes(0xff);
  cuda_ops::moe_experts(r_rows.view(), d_x.view(), expert_weights(d_gu, d_dw), d.view(), r_act.view(),
                        cuda_test::on());
  describe_mismatch(by_pair(r_act.download_f32(), Im), act_got, P, Im, k, ids, pair_rows, d_offsets, -1.f, 0.f,
                    what + " act, second run vs first");
  describe_mismatch(by_pair(r_rows.download_f32(), H), by_pair(rows, H), P, H, k, ids, pair_rows, d_offsets, -1.f,
                    0.f, what + " rows, second run vs first");
  // The same grouping through the bf16 kernel on the bf16 values: the same rows, bit for bit.
  DeviceTensor b_gu(DType::kBF16, gu.shape(), gu_bf16.bits), b_dw(DType::kBF16, dw.shape(), dw_bf16.bits);
  DeviceTensor b_rows(DType::kBF16, {P, H}), b_act(DType::kBF16, {P, Im});
  b_rows.fill_bytes(0xff);
  cuda_ops::moe_experts(b_rows.view(), d_x.view(), {b_gu.view(), b_dw.view()}, d.view(), b_act.view(),
                        cuda_test::on());
  describe_mismatch(act_got, by_pair(b_act.download_f32(), Im), P, Im, k, ids, pair_rows, d_offsets, -1.f, 0.f,
                    what + " act vs the bf16 kernel");
  describe_mismatch(by_pair(rows, H), by_pair(b_rows.download_f32(), H), P, H, k, ids, pair_rows, d_offsets, -1.f,
                    0.f, what + " rows vs the bf16 kernel");
}

// Each shape with bf16 experts, and with fp8 ones where it is whole 128 x 128 blocks.
void check_experts_both(int64_t T, int64_t E, int64_t k, int64_t H, int64_t Im, int64_t used, std::mt19937& rng) {
  check_experts(ExpertDtype::kBf16, T, E, k, H, Im, used, rng);
  if (fp8_shape(H, Im)) check_experts(ExpertDtype::kFp8, T, E, k, H, Im, used, rng);
}

TEST(CudaMoe, ExpertsWeightStreamingKernelMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(3);
  check_experts_both(1, 8, 2, 64, 32, 8, rng);       // one 8-token tile
  check_experts_both(5, 128, 8, 256, 96, 60, rng);   // most experts without a row
  check_experts_both(13, 9, 3, 72, 40, 9, rng);      // two 8-token tiles; Im not a multiple of 16; K tails
  check_experts_both(31, 16, 4, 128, 24, 5, rng);    // ~25 rows per expert: two token chunks
  check_experts_both(1, 128, 8, 2048, 768, 8, rng);  // the Qwen3-30B-A3B shape at bs = 1
  // fp8 (and bf16) on whole blocks: 1 and 2 tokens, odd expert counts, most experts without a row, K steps of 512
  // columns left partial (384, 640), ~25 rows per expert (token chunks), the 30B-A3B shape at a TP 2 rank's Im.
  check_experts_both(1, 8, 2, 128, 128, 8, rng);
  check_experts_both(2, 7, 3, 128, 384, 7, rng);
  check_experts_both(5, 128, 8, 256, 128, 60, rng);
  check_experts_both(13, 9, 3, 384, 256, 9, rng);
  check_experts_both(31, 16, 4, 640, 128, 5, rng);
  check_experts_both(4, 128, 8, 2048, 384, 30, rng);
}

// Steps past kMoeGemvMaxTokens: the tiled GEMM (wgmma on sm_90a, else mma.sync).
void check_tiled_shapes() {
  std::mt19937 rng(4);
  check_experts_both(33, 16, 4, 136, 40, 16, rng);   // K tail (136 = 4 x 32 + 8), a partial column tile
  check_experts_both(300, 128, 8, 256, 64, 64, rng);  // half the experts without rows
  check_experts_both(200, 7, 2, 64, 200, 7, rng);    // > 128 rows per expert: several row tiles; 4 column tiles
  check_experts_both(257, 128, 8, 2048, 768, 24, rng);  // the Qwen3-30B-A3B shape, 24 experts busy
  // fp8 (and bf16) on whole blocks: odd expert counts, experts without rows, several row and column tiles.
  check_experts_both(33, 16, 4, 256, 128, 16, rng);
  check_experts_both(300, 128, 8, 256, 128, 64, rng);
  check_experts_both(200, 7, 2, 128, 384, 7, rng);
  check_experts_both(45, 5, 3, 640, 256, 4, rng);
}

TEST(CudaMoe, ExpertsTiledKernelMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  check_tiled_shapes();
}

// The mma.sync tile GEMM, the path of devices without sm_90a code, kept tested on sm_90a.
struct MmaSyncTilesGuard : cuda_test::RestoreOptions {
  MmaSyncTilesGuard() { cuda_test::context().options.moe_gemm_wgmma = false; }
};

TEST(CudaMoe, ExpertsMmaSyncTiledKernelMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  const MmaSyncTilesGuard mma_sync;
  check_tiled_shapes();
}

TEST(CudaMoe, CombineMatchesTheReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  for (auto [T, k, H] : {std::tuple{1, 1, 8}, {7, 3, 1000}, {129, 8, 2048}, {5, 2, 33}}) {
    const int64_t P = T * k;
    auto rows = random_bf16(static_cast<size_t>(P * H), rng);
    std::vector<float> w(static_cast<size_t>(T * k));
    std::uniform_real_distribution<float> u(0.f, 1.f);
    for (float& v : w) v = u(rng);
    std::vector<int32_t> perm(static_cast<size_t>(P));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    DeviceTensor d_rows(DType::kBF16, {P, H}, rows.bits), d_w(DType::kF32, {T, k}, w), d_perm(DType::kI32, {P}, perm);
    DeviceTensor d_out(DType::kBF16, {T, H});
    d_out.fill_bytes(0xff);
    cuda_ops::moe_combine(d_out.view(), d_rows.view(), d_w.view(), d_perm.view(), cuda_test::on());
    std::vector<float> ref(static_cast<size_t>(T * H));
    cpu::moe_combine(hv(ref, {T, H}), hv(rows.f32, {P, H}), hv(w, {T, k}), hv(perm, {P}));
    expect_close(d_out.download_f32(), ref, 1e-2f, 5e-3f, "combine H=" + std::to_string(H));
  }
}

// The whole sparse MLP on the GPU (ops::moe_mlp; at T = 1 the decode kernels of moe_decode.cu: router + routing +
// grouping, gate / up, down + combine; at T = 6 the general path's) with bf16 and with fp8 experts
// against the CPU ops fed with the GPU's routing (the GPU's bf16 router logits may tie where the CPU's fp32 ones
// do not); run eagerly, then from a CUDA graph captured for another input: the routing changes, the graph stays.
void check_sparse_mlp_and_graph(ExpertDtype dtype, int64_t T, std::mt19937& rng) {
  const int64_t E = 16, k = 4, H = 128, Im = dtype == ExpertDtype::kFp8 ? 128 : 64, P = T * k;
  const std::string name = dtype_name(dtype) + " T=" + std::to_string(T) + " ";
  auto router = random_bf16(static_cast<size_t>(E * H), rng, -0.3f, 0.3f);
  HostExperts gu = random_experts(dtype, E, 2 * Im, H, E, rng), dw = random_experts(dtype, E, H, Im, E, rng);
  DeviceTensor d_router(DType::kBF16, {E, H}, router.bits);
  const DeviceExperts d_gu(gu), d_dw(dw);
  DeviceTensor d_x(DType::kBF16, {T, H}), d_out(DType::kBF16, {T, H});
  DeviceTensor d_logits(DType::kBF16, {T, E}), d_ids(DType::kI32, {T, k}), d_w(DType::kF32, {T, k});
  DeviceTensor d_act(DType::kBF16, {P, Im}), d_rows(DType::kBF16, {P, H});
  DeviceGroups d(P, E);
  const ops::MoeWorkspace ws{d_logits.view(), d_ids.view(), d_w.view(), d.view(), d_act.view(), d_rows.view()};
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  auto check = [&](const cuda_test::Bf16Data& x, const std::string& what) {
    std::vector<int32_t> ids = d_ids.download<int32_t>();
    std::vector<float> w = d_w.download<float>();
    HostGroups h(ids, T, k, E);
    std::vector<float> rows(static_cast<size_t>(P * H)), ref(static_cast<size_t>(T * H));
    std::vector<uint16_t> act(static_cast<size_t>(P * Im));
    std::vector<float> xf = x.f32;
    cpu::moe_experts(hv(rows, {P, H}), hv(xf, {T, H}), hv(gu.f32, {E, 2 * Im, H}), hv(dw.f32, {E, H, Im}), h.view(),
                     hv(act, {P, Im}));
    cpu::moe_combine(hv(ref, {T, H}), hv(rows, {P, H}), hv(w, {T, k}), hv(h.rows, {P}));
    expect_close(d_out.download_f32(), ref, 2e-2f, 1e-2f, name + what);
    // The GPU's routing is the reference routing of the GPU's logits.
    std::vector<float> logits = d_logits.download_f32();
    std::vector<int32_t> want_ids(static_cast<size_t>(T * k));
    std::vector<float> want_w(static_cast<size_t>(T * k));
    cpu::moe_route(hv(want_ids, {T, k}), hv(want_w, {T, k}), hv(logits, {T, E}), true);
    expect_close(w, want_w, 1e-6f, 1e-5f, name + what + " routing weights");
    return ids;
  };
  auto upload = [&](const cuda_test::Bf16Data& x) {
    CUDA_CHECK(cudaMemcpyAsync(d_x.view().data(), x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice, st));
  };
  auto body = [&] {
    ops::moe_mlp(d_out.view(), d_x.view(), d_router.view(), expert_weights(d_gu, d_dw), true, ws, cuda_test::on(st));
  };
  const auto x1 = random_bf16(static_cast<size_t>(T * H), rng), x2 = random_bf16(static_cast<size_t>(T * H), rng);
  upload(x1);
  body();
  CUDA_CHECK(cudaStreamSynchronize(st));
  const std::vector<int32_t> ids1 = check(x1, "eager");
  upload(x2);
  const cudaGraphExec_t exec = cuda_test::warm_up_and_capture(st, body);  // captured with x2's routing
  upload(x1);
  CUDA_CHECK(cudaGraphLaunch(exec, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  EXPECT_EQ(check(x1, "graph replay, first input"), ids1);
  upload(x2);
  CUDA_CHECK(cudaGraphLaunch(exec, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  EXPECT_NE(check(x2, "graph replay, second input"), ids1) << name << "the two inputs route differently";
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaMoe, SparseMlpEagerAndFromAGraphMatchTheReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(6);
  for (ExpertDtype dtype : {ExpertDtype::kBf16, ExpertDtype::kFp8})
    for (int64_t T : {6, 1}) {
      if (T == 1 && cuda_test::device_major() < 9) continue;  // the decode router is a cluster (sm_90+)
      check_sparse_mlp_and_graph(dtype, T, rng);
    }
}

// Rows land in a different place each run (atomics), their values and the combined output do not.
TEST(CudaMoe, OutputIsBitwiseDeterministic) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(7);
  for (ExpertDtype dtype : {ExpertDtype::kBf16, ExpertDtype::kFp8})
  for (int64_t T : {16, 100}) {  // both expert kernels
    const int64_t E = 32, k = 8, H = 256, Im = 128, P = T * k;
    auto x = random_bf16(static_cast<size_t>(T * H), rng);
    auto router = random_bf16(static_cast<size_t>(E * H), rng);
    const HostExperts gu = random_experts(dtype, E, 2 * Im, H, E, rng), dw = random_experts(dtype, E, H, Im, E, rng);
    DeviceTensor d_x(DType::kBF16, {T, H}, x.bits), d_router(DType::kBF16, {E, H}, router.bits);
    const DeviceExperts d_gu(gu), d_dw(dw);
    DeviceTensor d_logits(DType::kBF16, {T, E}), d_ids(DType::kI32, {T, k}), d_w(DType::kF32, {T, k});
    DeviceTensor d_act(DType::kBF16, {P, Im}), d_rows(DType::kBF16, {P, H}), d_out(DType::kBF16, {T, H});
    DeviceGroups d(P, E);
    const ops::MoeWorkspace ws{d_logits.view(), d_ids.view(), d_w.view(), d.view(), d_act.view(), d_rows.view()};
    std::vector<uint16_t> first;
    for (int run = 0; run < 3; ++run) {
      ops::moe_mlp(d_out.view(), d_x.view(), d_router.view(), expert_weights(d_gu, d_dw), true, ws, cuda_test::on());
      const auto out = d_out.download<uint16_t>();
      if (run == 0) first = out;
      EXPECT_EQ(out, first) << dtype_name(dtype) << " T=" << T << " run " << run;
    }
  }
}

TEST(CudaMoe, UnsupportedShapesAreClearErrors) {
  SKIP_WITHOUT_CUDA();
  const int64_t T = 2, E = 4, k = 2, H = 12, Im = 8, P = T * k;  // H % 8 != 0
  DeviceTensor d_x(DType::kBF16, {T, H}), d_gu(DType::kBF16, {E, 2 * Im, H}), d_dw(DType::kBF16, {E, H, Im});
  DeviceTensor d_rows(DType::kBF16, {P, H}), d_act(DType::kBF16, {P, Im});
  DeviceGroups d(P, E);
  try {
    ops::moe_experts(d_rows.view(), d_x.view(), {d_gu.view(), d_dw.view()}, d.view(), d_act.view(), cuda_test::on());
    ADD_FAILURE() << "no error for H = 12";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 8"), std::string::npos) << e.what();
  }
  // fp8 experts need whole 128 x 128 blocks: H = 136 is refused, naming the sizes.
  const int64_t H8 = 136, Im8 = 128;
  DeviceTensor f_x(DType::kBF16, {T, H8}), f_gu(DType::kF8E4M3, {E, 2 * Im8, H8}), f_dw(DType::kF8E4M3, {E, H8, Im8});
  DeviceTensor f_gs(DType::kF32, {E, 2, 1}), f_ds(DType::kF32, {E, 1, 1});
  DeviceTensor f_rows(DType::kBF16, {P, H8}), f_act(DType::kBF16, {P, Im8});
  try {
    ops::moe_experts(f_rows.view(), f_x.view(), {f_gu.view(), f_dw.view(), f_gs.view(), f_ds.view()}, d.view(),
                     f_act.view(), cuda_test::on());
    ADD_FAILURE() << "no error for fp8 experts with H = 136";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nanovllm
