// Decode-latency paths: the fused MLP activations (ops::linear_silu_mul: silu_mul in the down projection;
// gemv_gate_up_silu: silu_mul in the gate_up projection's epilogue; ops::silu_mlp, the MLP that picks
// between them) against the CPU reference and
// against the unfused GPU kernels (bitwise, every gemv launch shape), PDL-launched kernel chains inside
// a captured CUDA graph replayed with changing inputs, and a DISABLED_ benchmark of Qwen3-0.6B- and
// 8B-shaped decode layers (bs 1, context 1024) replayed from a graph, with ablations.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "kernel_timeline.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/gemv.cuh"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::graph_replay_ms;
using cuda_test::random_bf16;

// CPU reference: silu_mul in fp32, the activation rounded to bf16 (what the GPU stores between the two
// steps, fused or not), then linear in fp32 on the bf16 inputs' exact values.
std::vector<float> cpu_linear_silu(std::vector<float> gu, std::vector<float> w, int64_t T, int64_t N, int64_t I) {
  std::vector<float> act(static_cast<size_t>(T * I)), out(static_cast<size_t>(T * N));
  ops::silu_mul(cuda_test::host_view(act, {T, I}), cuda_test::host_view(gu, {T, 2 * I}));
  for (float& a : act) a = bf16_to_f32(f32_to_bf16(a));
  ops::linear(cuda_test::host_view(out, {T, N}), cuda_test::host_view(act, {T, I}), cuda_test::host_view(w, {N, I}),
              TensorView());
  return out;
}

TEST(CudaDecodeFusion, LinearSiluMulMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(11);
  const int64_t N = 200, I = 392;
  for (const int64_t T : {1, 3, 8, 9, 16, 37}) {  // 37: beyond gemv, silu_mul + cuBLASLt
    const auto gu = random_bf16(static_cast<size_t>(T * 2 * I), rng, -3.0f, 3.0f);
    const auto w = random_bf16(static_cast<size_t>(N * I), rng, -0.2f, 0.2f);
    DeviceTensor d_gu(DType::kBF16, {T, 2 * I}, gu.bits), d_w(DType::kBF16, {N, I}, w.bits);
    DeviceTensor d_act(DType::kBF16, {T, I});
    for (const DType out_dt : {DType::kBF16, DType::kF32}) {
      DeviceTensor d_out(out_dt, {T, N});
      d_out.fill_bytes(0xff);  // NaN poison
      ops::linear_silu_mul(d_out.view(), d_gu.view(), d_w.view(), d_act.view(), cuda_test::on());
      const std::vector<float> ref = cpu_linear_silu(gu.f32, w.f32, T, N, I);
      // Same bf16 activation on both sides: what is left is fp32 summation order (and the bf16 output).
      cuda_test::expect_close(d_out.download_f32(), ref, 1e-2f, 1e-2f, "linear_silu_mul T=" + std::to_string(T));
      EXPECT_LT(cuda_test::nmse(d_out.download_f32(), ref), 1e-4) << "T=" << T;
    }
  }
}

// gemv_silu == silu_mul + gemv, bit for bit, for every launch shape the dispatch may pick.
TEST(CudaDecodeFusion, GemvSiluBitwiseEqualsUnfused) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(12);
  const int64_t N = 1000, I = 3072;  // K split across CTAs for some shapes
  for (const int64_t T : {1, 2, 4, 16}) {  // the bulk kernel stages the activation for T 1 and 2
    const auto gu = random_bf16(static_cast<size_t>(T * 2 * I), rng, -4.0f, 4.0f);
    const auto w = random_bf16(static_cast<size_t>(N * I), rng, -0.1f, 0.1f);
    DeviceTensor d_gu(DType::kBF16, {T, 2 * I}, gu.bits), d_w(DType::kBF16, {N, I}, w.bits);
    DeviceTensor d_act(DType::kBF16, {T, I}), d_a(DType::kBF16, {T, N}), d_b(DType::kBF16, {T, N});
    for (const cuda_ops::GemvConfig& c : cuda_ops::gemv_candidates(T, N, I, cuda_test::context(), /*silu=*/true)) {
      d_a.fill_bytes(0xff);
      d_b.fill_bytes(0x7f);
      cuda_ops::gemv_silu(d_a.view(), d_gu.view(), d_w.view(), cuda_test::on(), &c);
      cuda_ops::silu_mul(d_act.view(), d_gu.view(), cuda_test::on());
      cuda_ops::gemv(d_b.view(), d_act.view(), d_w.view(), TensorView(), cuda_test::on(), &c);
      EXPECT_EQ(d_a.download<uint16_t>(), d_b.download<uint16_t>())
          << "T=" << T << " RT=" << c.rows_tiles_per_cta << " split=" << c.k_split;
    }
  }
}

// CPU reference of gemv_gate_up_silu: gate_up = x W^T in double rounded to bf16 (what the GPU stores or
// keeps), then silu(gate) * up in fp32 rounded to bf16.
std::vector<float> cpu_gate_up_silu(const std::vector<float>& x, const std::vector<float>& w, int64_t T, int64_t I,
                                    int64_t K) {
  auto bf = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  std::vector<float> act(static_cast<size_t>(T * I));
  for (int64_t t = 0; t < T; ++t) {
    auto dot = [&](int64_t row) {
      double a = 0;
      for (int64_t k = 0; k < K; ++k) a += static_cast<double>(x[t * K + k]) * w[row * K + k];
      return bf(static_cast<float>(a));
    };
    for (int64_t i = 0; i < I; ++i) {
      const float g = dot(i), u = dot(I + i);
      act[t * I + i] = bf(g / (1.0f + std::exp(-g)) * u);
    }
  }
  return act;
}

// gemv_gate_up_silu == gemv (same launch shape) + silu_mul, bit for bit, and close to the CPU reference,
// for every launch shape the dispatch may pick. I = 528 is 33 row tiles: with RT 4 and 8 the last CTA's
// gate tiles run past I (their rows are read from the up half and never stored); K = 1000 ends in a
// partial warp step.
TEST(CudaDecodeFusion, GemvGateUpSiluBitwiseEqualsUnfused) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(14);
  const int64_t K = 1000;
  for (const int64_t I : {528, 3072}) {
    for (const int64_t T : {1, 3, 8, 9, 16}) {
      const auto x = random_bf16(static_cast<size_t>(T * K), rng);
      const auto w = random_bf16(static_cast<size_t>(2 * I * K), rng, -0.1f, 0.1f);
      DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {2 * I, K}, w.bits);
      DeviceTensor d_gu(DType::kBF16, {T, 2 * I}), d_a(DType::kBF16, {T, I}), d_b(DType::kBF16, {T, I});
      const std::vector<float> ref = cpu_gate_up_silu(x.f32, w.f32, T, I, K);
      for (const cuda_ops::GemvConfig& c : cuda_ops::gemv_gate_up_silu_candidates(2 * I)) {
        const std::string what = "I=" + std::to_string(I) + " T=" + std::to_string(T) + " RT=" +
                                 std::to_string(c.rows_tiles_per_cta);
        d_a.fill_bytes(0xff);
        d_b.fill_bytes(0x7f);
        cuda_ops::gemv_gate_up_silu(d_a.view(), d_x.view(), d_w.view(), cuda_test::on(), &c);
        cuda_ops::gemv(d_gu.view(), d_x.view(), d_w.view(), TensorView(), cuda_test::on(), &c);
        cuda_ops::silu_mul(d_b.view(), d_gu.view(), cuda_test::on());
        EXPECT_EQ(d_a.download<uint16_t>(), d_b.download<uint16_t>()) << what;
        // fp32 summation order against double, then two bf16 roundings: a few bf16 ulps.
        cuda_test::expect_close(d_a.download_f32(), ref, 2e-3f, 2e-2f, what);
      }
    }
  }
}

// The MLP op, whichever way the dispatch runs it: the gate_up epilogue fused for gemv-sized batches with
// gate_up weights of 16 MiB and more (I = 2048, K = 2048; I = 2056 is not a whole number of row tiles),
// otherwise linear + linear_silu_mul (K = 264; T = 37 beyond gemv). Reference: the bf16 activation of
// cpu_gate_up_silu, then the down projection in fp32.
TEST(CudaDecodeFusion, SiluMlpMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(15);
  const int64_t N = 200;
  for (const auto& [I, K] : {std::pair<int64_t, int64_t>{2048, 2048}, {2056, 2048}, {528, 264}}) {
    for (const int64_t T : {1, 3, 16, 37}) {
      const auto x = random_bf16(static_cast<size_t>(T * K), rng);
      const auto wgu = random_bf16(static_cast<size_t>(2 * I * K), rng, -0.05f, 0.05f);
      const auto wd = random_bf16(static_cast<size_t>(N * I), rng, -0.1f, 0.1f);
      DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_wgu(DType::kBF16, {2 * I, K}, wgu.bits);
      DeviceTensor d_wd(DType::kBF16, {N, I}, wd.bits), d_out(DType::kBF16, {T, N});
      DeviceTensor d_gu(DType::kBF16, {T, 2 * I}), d_act(DType::kBF16, {T, I});
      std::vector<float> act = cpu_gate_up_silu(x.f32, wgu.f32, T, I, K);
      const std::vector<float> ref = cuda_test::linear_reference(act, wd.f32, T, N, I);
      for (int call = 0; call < 2; ++call) {  // first call times the options, the second runs the pick
        d_out.fill_bytes(0xff);  // NaN poison
        ops::silu_mlp(d_out.view(), d_x.view(), d_wgu.view(), d_wd.view(), d_gu.view(), d_act.view(), cuda_test::on());
        const std::string what = "I=" + std::to_string(I) + " K=" + std::to_string(K) + " T=" + std::to_string(T);
        // The bf16 activation may differ from the reference's in a last bit; then fp32 order and bf16 out.
        cuda_test::expect_close(d_out.download_f32(), ref, 1e-2f, 2e-2f, what);
        EXPECT_LT(cuda_test::nmse(d_out.download_f32(), ref), 1e-4) << what;
      }
    }
  }
}

// A PDL chain (embedding -> rms_norm -> gemv -> fused down gemv -> add_rms_norm -> gather_rows) captured
// once and replayed with new token ids each time: every replay must match the CPU reference, so no
// kernel read its predecessor's output before it was complete.
// mlp: the dispatch's picks for gate_up and the fused down projection (ops::linear, ops::linear_silu_mul);
// the bulk-copy gemv for both (its producer copies weights before pdl_wait) with one unit per CTA (the
// down projection's tiles split across CTAs); or gemv_gate_up_silu (RT 4: the last CTA's gate tiles run
// past I) then ops::linear, as Decoder's layer.
// early_norm: the norms trigger their dependents before their wait (KernelOptions::pdl_early_norm), or after.
enum class MlpKernels { kDispatch, kBulkGemv, kGateUpSilu };

void check_graph_replay_with_changing_inputs(MlpKernels mlp, bool early_norm) {
  cuda_test::RestoreOptions restore;
  cuda_test::context().options.pdl = true;
  cuda_test::context().options.pdl_early_norm = early_norm;
  std::mt19937 rng(13);
  const int64_t V = 97, H = 264, I = 528, T = 3;
  const auto table = random_bf16(static_cast<size_t>(V * H), rng);
  const auto nw = random_bf16(static_cast<size_t>(H), rng, 0.5f, 1.5f);
  const auto wgu = random_bf16(static_cast<size_t>(2 * I * H), rng, -0.2f, 0.2f);
  const auto wd = random_bf16(static_cast<size_t>(H * I), rng, -0.1f, 0.1f);
  DeviceTensor d_table(DType::kBF16, {V, H}, table.bits), d_nw(DType::kBF16, {H}, nw.bits);
  DeviceTensor d_wgu(DType::kBF16, {2 * I, H}, wgu.bits), d_wd(DType::kBF16, {H, I}, wd.bits);
  DeviceTensor d_ids(DType::kI32, {T}), d_rows(DType::kI32, {2}, std::vector<int32_t>{2, 0});
  DeviceTensor d_x(DType::kBF16, {T, H}), d_h(DType::kBF16, {T, H}), d_gu(DType::kBF16, {T, 2 * I});
  DeviceTensor d_act(DType::kBF16, {T, I}), d_res(DType::kBF16, {T, H}), d_out(DType::kBF16, {2, H});
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const ops::Stream s = cuda_test::on(st);
  auto chain = [&] {
    ops::embedding(d_x.view(), d_ids.view(), d_table.view(), s);     // x = E[ids]
    ops::rms_norm(d_h.view(), d_x.view(), d_nw.view(), 1e-6f, s);    // h = norm(x)
    if (mlp == MlpKernels::kBulkGemv) {
      const cuda_ops::GemvConfig gu_cfg = cuda_ops::gemv_bulk_config(2 * I, H, 1), d_cfg = cuda_ops::gemv_bulk_config(H, I, 1);
      cuda_ops::gemv(d_gu.view(), d_h.view(), d_wgu.view(), TensorView(), s, &gu_cfg);
      cuda_ops::gemv_silu(d_res.view(), d_gu.view(), d_wd.view(), s, &d_cfg);  // res = mlp(h)
    } else if (mlp == MlpKernels::kGateUpSilu) {
      const cuda_ops::GemvConfig rt4 = cuda_ops::gemv_gate_up_silu_candidates(2 * I)[1];
      cuda_ops::gemv_gate_up_silu(d_act.view(), d_h.view(), d_wgu.view(), s, &rt4);
      ops::linear(d_res.view(), d_act.view(), d_wd.view(), TensorView(), s);  // res = mlp(h)
    } else {
      ops::linear(d_gu.view(), d_h.view(), d_wgu.view(), TensorView(), s);
      ops::linear_silu_mul(d_res.view(), d_gu.view(), d_wd.view(), d_act.view(), s);  // res = mlp(h)
    }
    ops::add_rms_norm(d_x.view(), d_res.view(), d_nw.view(), 1e-6f, s);              // res += x; x = norm(res)
    ops::gather_rows(d_out.view(), d_x.view(), d_rows.view(), s);
  };
  std::vector<int32_t> ids = {5, 17, 96};
  CUDA_CHECK(cudaMemcpy(d_ids.view().data(), ids.data(), 12, cudaMemcpyHostToDevice));
  cudaGraphExec_t exec = cuda_test::warm_up_and_capture(st, chain);

  // CPU reference of the same chain (bf16 roundings mirrored where the GPU stores bf16).
  auto bf = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  auto norm_row = [&](const float* in, float* out) {
    double ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(in[i]) * in[i];
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / H) + 1e-6f);
    for (int64_t i = 0; i < H; ++i) out[i] = bf(nw.f32[i] * (in[i] * r));
  };
  std::uniform_int_distribution<int> pick(0, static_cast<int>(V) - 1);
  for (int round = 0; round < 6; ++round) {
    for (auto& id : ids) id = pick(rng);
    CUDA_CHECK(cudaMemcpyAsync(d_ids.view().data(), ids.data(), 12, cudaMemcpyHostToDevice, st));
    d_out.fill_bytes(0xff);
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaStreamSynchronize(st));

    std::vector<float> x(T * H), h(T * H), res(T * H), xo(T * H);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) x[t * H + i] = table.f32[ids[t] * H + i];
    for (int64_t t = 0; t < T; ++t) norm_row(&x[t * H], &h[t * H]);
    const std::vector<float> act = cpu_gate_up_silu(h, wgu.f32, T, I, H);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < H; ++n) {
        double a = 0;
        for (int64_t k = 0; k < I; ++k) a += static_cast<double>(act[t * I + k]) * wd.f32[n * I + k];
        res[t * H + n] = bf(bf(static_cast<float>(a)) + x[t * H + n]);
      }
    for (int64_t t = 0; t < T; ++t) norm_row(&res[t * H], &xo[t * H]);
    std::vector<float> ref;
    for (const int64_t r : {2, 0}) ref.insert(ref.end(), xo.begin() + r * H, xo.begin() + (r + 1) * H);
    cuda_test::expect_close(d_out.download_f32(), ref, 3e-2f, 3e-2f,
                            "replay " + std::to_string(round) + (early_norm ? ", early norm trigger" : ""));
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaDecodePdl, GraphReplayWithChangingInputs) {
  SKIP_WITHOUT_CUDA();
  for (const bool early_norm : {false, true}) check_graph_replay_with_changing_inputs(MlpKernels::kDispatch, early_norm);
}

TEST(CudaDecodePdl, GraphReplayWithChangingInputsGateUpSilu) {
  SKIP_WITHOUT_CUDA();
  for (const bool early_norm : {false, true}) check_graph_replay_with_changing_inputs(MlpKernels::kGateUpSilu, early_norm);
}

TEST(CudaDecodePdl, GraphReplayWithChangingInputsBulkGemv) {
  SKIP_WITHOUT_CUDA();
  if (!cuda_ops::gemv_bulk_available(cuda_test::context())) GTEST_SKIP() << "bulk-copy gemv needs sm_90";
  for (const bool early_norm : {false, true}) check_graph_replay_with_changing_inputs(MlpKernels::kBulkGemv, early_norm);
}

// ---- Benchmark: one decode layer (T = 1, context 1024) of the Qwen3-0.6B and Qwen3-8B shapes, L distinct
// layers per graph so the weights stream from HBM as in the model (more than L2 in total). Rows: PDL off /
// on, then ablations with PDL on (the layer without attention, without the norms, ...) whose differences
// are each part's in-graph cost. Each row runs on a kernel context of its own (its linear choices timed
// afresh), as a runner would.
struct LayerShape {
  const char* name;
  int64_t H, Hq, Hk, I, L;
};

// Cheap uniform bf16 fill for GBs of benchmark weights (no reference needs the fp32 values).
std::vector<uint16_t> fast_random_bf16(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<uint16_t> bits(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
    bits[i] = f32_to_bf16(lo + (hi - lo) * (u + 1e-3f));
  }
  return bits;
}

struct Ablation {
  const char* name;
  bool pdl = true, attention = true, norms = true, fused_silu = true;
  bool prologue = true;  // with attention: false leaves qkv_prologue out (attention reads last replay's q)
  bool gemvs = true;     // false: no projections (with norms off: attention alone, back to back)
  bool fused_prologue = true;   // KernelOptions::decode_fused_prologue
  bool cluster_combine = true;  // KernelOptions::decode_cluster_combine
};

// A kernel context with the ablation's options (each ablation times its linear choices afresh).
std::unique_ptr<cuda_ops::DeviceContext> context_for(const Ablation& a) {
  auto ctx = std::make_unique<cuda_ops::DeviceContext>(0);
  ctx->options.pdl = a.pdl;
  ctx->options.decode_fused_prologue = a.fused_prologue;
  ctx->options.decode_cluster_combine = a.cluster_combine;
  return ctx;
}

// L distinct decode layers of one shape with their weights, KV caches (context 1024, block size 16,
// shuffled block table) and step buffers; forward() enqueues one token through all of them.
struct DecodeLayerStack {
  struct Layer {
    std::unique_ptr<DeviceTensor> wqkv, wo, wgu, wd, n1, n2, qn, kn, kc, vc;
  };
  static constexpr int64_t D = 128, BS = 16, ctx = 1024;
  int64_t H, Hq, Hk, I, L, QKV, NB;
  uint64_t seed = 21;
  std::vector<Layer> layers;
  std::unique_ptr<DeviceTensor> x, res, qkv, q, ao, gu, act, cu, cl, bt, pos, slot, invf;
  AttentionMetadata meta{};
  ops::RopeParams rope{};

  std::unique_ptr<DeviceTensor> rnd(Shape s, float lo, float hi) {
    return std::make_unique<DeviceTensor>(DType::kBF16, s,
                                          fast_random_bf16(static_cast<size_t>(s.numel()), ++seed, lo, hi));
  }

  explicit DecodeLayerStack(const LayerShape& sh)
      : H(sh.H), Hq(sh.Hq), Hk(sh.Hk), I(sh.I), L(sh.L), QKV((sh.Hq + 2 * sh.Hk) * D), NB(ctx / BS + 1) {
    layers.resize(static_cast<size_t>(L));
    for (auto& l : layers) {
      l.wqkv = rnd({QKV, H}, -0.05f, 0.05f);
      l.wo = rnd({H, Hq * D}, -0.05f, 0.05f);
      l.wgu = rnd({2 * I, H}, -0.05f, 0.05f);
      l.wd = rnd({H, I}, -0.05f, 0.05f);
      l.n1 = rnd({H}, 0.5f, 1.5f);
      l.n2 = rnd({H}, 0.5f, 1.5f);
      l.qn = rnd({D}, 0.5f, 1.5f);
      l.kn = rnd({D}, 0.5f, 1.5f);
      l.kc = rnd({NB, BS, Hk, D}, -1.0f, 1.0f);
      l.vc = rnd({NB, BS, Hk, D}, -1.0f, 1.0f);
    }
    x = rnd({1, H}, -1.0f, 1.0f);
    res = rnd({1, H}, -1.0f, 1.0f);
    qkv = std::make_unique<DeviceTensor>(DType::kBF16, Shape{1, QKV});
    q = std::make_unique<DeviceTensor>(DType::kBF16, Shape{1, Hq, D});
    ao = std::make_unique<DeviceTensor>(DType::kBF16, Shape{1, Hq, D});
    gu = std::make_unique<DeviceTensor>(DType::kBF16, Shape{1, 2 * I});
    act = std::make_unique<DeviceTensor>(DType::kBF16, Shape{1, I});
    std::mt19937 rng(21);
    std::vector<int32_t> bt_h(static_cast<size_t>(NB));
    std::iota(bt_h.begin(), bt_h.end(), 0);
    std::shuffle(bt_h.begin(), bt_h.end(), rng);
    cu = std::make_unique<DeviceTensor>(DType::kI32, Shape{2}, std::vector<int32_t>{0, 1});
    cl = std::make_unique<DeviceTensor>(DType::kI32, Shape{1}, std::vector<int32_t>{ctx});
    bt = std::make_unique<DeviceTensor>(DType::kI32, Shape{1, NB}, bt_h);
    pos = std::make_unique<DeviceTensor>(DType::kI32, Shape{1}, std::vector<int32_t>{ctx - 1});
    slot = std::make_unique<DeviceTensor>(
        DType::kI32, Shape{1},
        std::vector<int32_t>{bt_h[(ctx - 1) / BS] * static_cast<int32_t>(BS) + static_cast<int32_t>((ctx - 1) % BS)});
    std::vector<float> inv(D / 2);
    for (int64_t i = 0; i < D / 2; ++i) inv[i] = std::pow(1e6f, -2.0f * i / D);
    invf = std::make_unique<DeviceTensor>(DType::kF32, Shape{D / 2}, inv);
    meta = AttentionMetadata{};
    meta.num_seqs = meta.num_tokens = meta.max_query_len = 1;
    meta.max_context_len = ctx;
    meta.cu_seqlens_q = cu->view();
    meta.context_lens = cl->view();
    meta.block_tables = bt->view();
    meta.slot_mapping = slot->view();
    meta.block_size = BS;
    rope = ops::RopeParams{invf->view(), 1.0f};
  }

  double weight_mb() const { return static_cast<double>((QKV * H + H * Hq * D + 2 * I * H + H * I) * 2) / 1e6; }

  void forward(const Ablation& a, ops::Stream s) {
    for (const Layer& l : layers) {
      if (a.norms) ops::add_rms_norm(x->view(), res->view(), l.n1->view(), 1e-6f, s);
      if (a.gemvs) ops::linear(qkv->view(), x->view(), l.wqkv->view(), TensorView(), s, ops::LinearHint::kBeforeAttention);
      if (a.attention && a.prologue) {  // as Decoder::layer (the prologue fused in where it can be)
        ops::qkv_prologue_attention(ao->view(), q->view(), qkv->view(), l.qn->view(), l.kn->view(), 1e-6f,
                                    pos->view(), rope, l.kc->view(), l.vc->view(), meta, 0.088f, s);
      } else if (a.attention) {
        ops::paged_attention(ao->view(), q->view(), l.kc->view(), l.vc->view(), meta, 0.088f, s);
      }
      if (!a.gemvs) continue;
      ops::linear(x->view(), ao->view().reshape({1, Hq * D}), l.wo->view(), TensorView(), s);
      if (a.norms) ops::add_rms_norm(x->view(), res->view(), l.n2->view(), 1e-6f, s);
      if (a.fused_silu) {  // as Decoder::layer
        ops::silu_mlp(x->view(), x->view(), l.wgu->view(), l.wd->view(), gu->view(), act->view(), s);
      } else {
        ops::linear(gu->view(), x->view(), l.wgu->view(), TensorView(), s);
        ops::silu_mul(act->view(), gu->view(), s);
        ops::linear(x->view(), act->view(), l.wd->view(), TensorView(), s);
      }
    }
  }
};

void bench_decode_layers(const LayerShape& sh) {
  DecodeLayerStack stack(sh);
  const int64_t L = sh.L;
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::printf("%s decode layer (T=1, ctx 1024, %.1f MB of weights), %lld distinct layers per graph\n", sh.name,
              stack.weight_mb(), static_cast<long long>(L));
  std::printf("%-34s | %10s %10s %10s\n", "variant", "us/layer", "min", "max");
  std::vector<Ablation> rows = {
      {.name = "PDL off", .pdl = false},
      {.name = "PDL on (the model's layer)"},
      {.name = "  without qkv_prologue + attention", .attention = false},
      {.name = "  without qkv_prologue only", .prologue = false},
      {.name = "  attention alone (back to back)", .norms = false, .prologue = false, .gemvs = false},
      {.name = "  qkv_prologue + attention alone", .norms = false, .gemvs = false},
      {.name = "  without the two add_rms_norm", .norms = false},
      {.name = "  silu_mul not fused", .fused_silu = false},
      {.name = "  gemvs only", .attention = false, .norms = false},
  };
  for (const Ablation& a : rows) {
    const std::unique_ptr<cuda_ops::DeviceContext> ctx = context_for(a);
    const ops::Stream s{st, ctx.get()};
    auto forward = [&](const Ablation& ab) { stack.forward(ab, s); };
    forward(a);  // warm-up: dispatch choices
    CUDA_CHECK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    forward(a);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, st));
    std::vector<float> us = graph_replay_ms(exec, st, 30);
    for (float& t : us) t *= 1000.0f / static_cast<float>(L);
    std::printf("%-34s | %10.2f %10.2f %10.2f\n", a.name, us[us.size() / 2], us.front(), us.back());
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

// ---- Timeline: each kernel of a decode layer against its predecessor, from CUPTI records of graph
// replays. Per position in the layer (medians over layers 1.. of every replay): "lead" = its start -
// the predecessor's end (negative: its CTAs started while the predecessor ran, PDL), "adds" = its end -
// the predecessor's end (its share of the layer's critical path), and its own duration.
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void timeline_decode_layers(const LayerShape& sh, const Ablation& a) {
  DecodeLayerStack stack(sh);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const std::unique_ptr<cuda_ops::DeviceContext> ctx = context_for(a);
  const ops::Stream s{st, ctx.get()};
  cudaGraphExec_t exec = cuda_test::warm_up_and_capture(st, [&] { stack.forward(a, s); });
  for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, st));
  const std::vector<float> plain = graph_replay_ms(exec, st, 20);
  constexpr int kReplays = 5;
  cuda_test::KernelTimeline tl;
  tl.start();
  for (int r = 0; r < kReplays; ++r) CUDA_CHECK(cudaGraphLaunch(exec, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  const std::vector<cuda_test::KernelRecord> recs = tl.stop();
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaStreamDestroy(st));
  const size_t per_replay = recs.size() / kReplays, L = static_cast<size_t>(sh.L);
  ASSERT_EQ(recs.size() % kReplays, 0u);
  ASSERT_EQ(per_replay % L, 0u) << per_replay << " kernels per replay for " << L << " layers";
  const size_t k = per_replay / L;
  std::vector<std::vector<double>> lead(k), adds(k), dur(k);
  std::vector<double> layer_us;
  for (size_t r = 0; r < kReplays; ++r) {
    for (size_t l = 1; l < L; ++l) {
      const size_t first = r * per_replay + l * k;
      layer_us.push_back(static_cast<double>(recs[first + k - 1].end_ns - recs[first - 1].end_ns) / 1e3);
      for (size_t j = 0; j < k; ++j) {
        const auto &cur = recs[first + j], &prev = recs[first + j - 1];
        lead[j].push_back((static_cast<double>(cur.start_ns) - static_cast<double>(prev.end_ns)) / 1e3);
        adds[j].push_back((static_cast<double>(cur.end_ns) - static_cast<double>(prev.end_ns)) / 1e3);
        dur[j].push_back(static_cast<double>(cur.end_ns - cur.start_ns) / 1e3);
      }
    }
  }
  std::printf("%s decode layer timeline (%s): %.2f us/layer traced, %.2f untraced (graph replay median)\n", sh.name,
              a.name, median_of(layer_us), plain[plain.size() / 2] * 1000.0 / static_cast<double>(L));
  std::printf("  %-24s %6s %8s | %8s %8s %8s\n", "kernel", "CTAs", "smem KB", "lead us", "adds us", "dur us");
  double sum_adds = 0.0;
  for (size_t j = 0; j < k; ++j) {
    const auto& r0 = recs[k + j];  // replay 0, layer 1
    const double ad = median_of(adds[j]);
    sum_adds += ad;
    std::printf("  %-24s %6d %8.1f | %8.2f %8.2f %8.2f\n", cuda_test::short_kernel_name(r0.name).c_str(), r0.grid,
                r0.dyn_smem / 1024.0, median_of(lead[j]), ad, median_of(dur[j]));
  }
  std::printf("  %-24s %6s %8s | %8s %8.2f\n", "sum", "", "", "", sum_adds);
}

TEST(CudaDecodePdlBench, DISABLED_LayerTimeline) {
  SKIP_WITHOUT_CUDA();
  if (!cuda_test::KernelTimeline::available()) GTEST_SKIP() << "CUPTI not loadable (set NANOVLLM_CUPTI_LIB)";
  for (const LayerShape& sh : {LayerShape{"Qwen3-0.6B", 1024, 16, 8, 3072, 28}, LayerShape{"Qwen3-8B", 4096, 32, 8, 12288, 6}}) {
    timeline_decode_layers(sh, Ablation{"the model's layer"});
    timeline_decode_layers(sh, Ablation{.name = "prologue not fused", .fused_prologue = false});
    timeline_decode_layers(
        sh, Ablation{.name = "prologue not fused, global split combine", .fused_prologue = false, .cluster_combine = false});
    timeline_decode_layers(sh, Ablation{.name = "gemvs only", .attention = false, .norms = false});
  }
}

TEST(CudaDecodePdlBench, DISABLED_DecodeLayers) {
  SKIP_WITHOUT_CUDA();
  bench_decode_layers({"Qwen3-0.6B", 1024, 16, 8, 3072, 28});
  bench_decode_layers({"Qwen3-8B", 4096, 32, 8, 12288, 6});  // 6 x 385 MB: far beyond L2
}

}  // namespace
}  // namespace nanovllm
