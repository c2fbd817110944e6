// CUDA block-scaled fp8 projections (fp8_linear.h, ops::linear_fp8) against their CPU references on fresh random
// inputs (weights quantized on the host with per-row magnitudes spread over 2^-4 .. 2^3, never zero blocks but
// one), odd row counts, N and K multiples of 128 (others refused), with and without bias, bf16 and f32 out.
//   * GEMV (rows <= kFp8MmaGemvMaxTokens: the FMA GEMV at one row, the tensor-core fp8_gemv_mma at 2 to 16) vs
//     cpu::linear_fp8 (f64 over the dequantized weights): the same products
//     up to fp32 summation order and output rounding: NMSE <= 1e-5 / per element |err| <= 1e-2 rms + 5e-3 |ref|
//     (bf16 out); NMSE <= 1e-9 / 1e-4 rms + 1e-5 |ref| (f32 out), as the bf16 gemv's tests.
//   * Each GEMV kernel and launch shape (fp8_gemv with an Fp8GemvConfig: the register-fed kernel, the bulk-copy
//     kernel with 1 / 2 / 4 KB row pieces and tiles whole or split across CTAs) vs the weights dequantized on the
//     host (f64 sums), same tolerances, N off multiples of 16 and K off multiples of 128 where the bulk kernel
//     takes them (K % 16 == 0), bitwise repeatable; the layouts each kernel refuses (fp8_gemv_mma's too).
//   * Activation quantization vs quantize_fp8_blocks of each row: codes and scales bit for bit, the scales in
//     both layouts (row-major for the mma.sync GEMM, k-block-major for cuBLASLt).
//   * Both GEMMs (KernelOptions::fp8_gemm: the mma.sync kernel, cuBLASLt's block-scaled matmul) vs
//     cpu::linear_fp8_quantized (the same quantized activations, f64 sums): products of e4m3 codes are exact,
//     the tensor cores' partial sums may keep fewer bits than fp32 (Hopper fp8 mma), so f32 out within NMSE 1e-7
//     / per element 2e-3 rms + 2e-3 |ref|; bf16 out NMSE 1e-5 / 1e-2 rms + 5e-3 |ref|. Against the exact
//     reference the activation quantization (e4m3: 4 significant bits) leaves NMSE <= 4e-3 (printed).
//   * cuBLASLt's GEMM alone (sm_90) on host-quantized activations, M 1 .. 1000 (odd too): it must take every bf16
//     shape of 16+ rows with K / 128 a multiple of 4 (fewer rows or f32 out it may refuse: printed) and refuse
//     K / 128 = 3 and the wrong scale layout (those run the mma.sync kernel).
//   * fp8_gemv_gate_up_silu (gate_up + silu_mul in one register-fed kernel at one token) vs the unfused pair, bit
//     for bit; ops::linear_fp8_silu vs the CPU op.
//   * ops::linear_fp8 dispatches all of them, chunks rows past its 32 MiB workspace, and is deterministic.
// DISABLED_ benchmarks: the decode shapes of Qwen3-0.6B / 8B, each fp8 GEMV launch shape vs the bf16 linear; decode
// batches of 1 to 16 rows, each fp8 route vs the bf16 linear; the 8B prefill GEMMs at 8192 rows: mma.sync vs
// cuBLASLt vs bf16 cuBLASLt.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/fp8_block.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_ops::Fp8Gemm;

const char* gemm_name(Fp8Gemm g) { return g == Fp8Gemm::kCublasLt ? "cublaslt" : "mma"; }

// ops::linear_fp8's GEMM is `gemm` (where it can run) while this lives.
struct Fp8GemmGuard : cuda_test::RestoreOptions {
  explicit Fp8GemmGuard(Fp8Gemm gemm) { cuda_test::context().options.fp8_gemm = gemm; }
};

struct HostFp8Weight {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes;  // [N, K]
  std::vector<float> scale;    // [ceil(N / 128), ceil(K / 128)]
};

// Rows of magnitudes 2^-4 .. 2^3 (blocks of very different scales); block (0, 0) all zero when `zero_block`.
HostFp8Weight random_fp8_weight(int64_t n, int64_t k, std::mt19937& rng, bool zero_block = false) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    const float mag = std::ldexp(1.0f, static_cast<int>(r % 8) - 4) / std::sqrt(static_cast<float>(k));
    for (int64_t c = 0; c < k; ++c) w[r * k + c] = (zero_block && r < 128 && c < 128) ? 0.0f : normal(rng) * mag;
  }
  HostFp8Weight h{n, k, std::vector<uint8_t>(w.size()),
                  std::vector<float>(static_cast<size_t>(fp8_blocks(n) * fp8_blocks(k)))};
  quantize_fp8_blocks(w.data(), n, k, h.codes.data(), h.scale.data());
  return h;
}

struct DeviceFp8Weight {
  DeviceTensor codes, scale;
  explicit DeviceFp8Weight(const HostFp8Weight& h)
      : codes(DType::kF8E4M3, Shape{h.n, h.k}, h.codes),
        scale(DType::kF32, Shape{fp8_blocks(h.n), fp8_blocks(h.k)}, h.scale) {}
};

TensorView host_codes(HostFp8Weight& h) { return TensorView(h.codes.data(), DType::kF8E4M3, Shape{h.n, h.k}); }
TensorView host_scale(HostFp8Weight& h) {
  return TensorView(h.scale.data(), DType::kF32, Shape{fp8_blocks(h.n), fp8_blocks(h.k)});
}

enum class Reference { kExact, kQuantizedActivations };

std::vector<float> reference(Reference which, std::vector<float>& x, HostFp8Weight& w, std::vector<float>* bias, int64_t T) {
  std::vector<float> ref(static_cast<size_t>(T * w.n));
  const TensorView out(ref.data(), DType::kF32, Shape{T, w.n}), in(x.data(), DType::kF32, Shape{T, w.k});
  const TensorView b = bias ? TensorView(bias->data(), DType::kF32, Shape{w.n}) : TensorView();
  if (which == Reference::kExact) {
    cpu::linear_fp8(out, in, host_codes(w), host_scale(w), b);
  } else {
    cpu::linear_fp8_quantized(out, in, host_codes(w), host_scale(w), b);
  }
  return ref;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double{x} * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

// The op's output on fresh inputs vs its reference (the GEMVs' exact one for T <= kFp8MmaGemvMaxTokens, the GEMM's
// quantized-activation one otherwise); bias_mode 0 none, 1 bf16, 2 f32. Returns the raw output bytes.
std::vector<uint8_t> check_linear_fp8(int64_t T, int64_t N, int64_t K, DType out_t, int bias_mode, std::mt19937& rng) {
  HostFp8Weight w = random_fp8_weight(N, K, rng, N >= 256 && K >= 256);
  const DeviceFp8Weight dw(w);
  auto x = cuda_test::random_bf16(static_cast<size_t>(T * K), rng, -2.0f, 2.0f);
  auto b = cuda_test::random_bf16(static_cast<size_t>(N), rng, -1.0f, 1.0f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_out(out_t, {T, N});
  DeviceTensor d_b = bias_mode == 2 ? DeviceTensor(DType::kF32, {N}, b.f32) : DeviceTensor(DType::kBF16, {N}, b.bits);
  d_out.fill_bytes(0xff);  // NaN poison: every element must be written
  ops::linear_fp8(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), bias_mode ? d_b.view() : TensorView(),
                  cuda_test::on());
  CUDA_CHECK(cudaGetLastError());
  const bool gemv = T <= kFp8MmaGemvMaxTokens, bf = out_t == DType::kBF16;
  const std::vector<float> got = d_out.download_f32();
  const std::vector<float> ref =
      reference(gemv ? Reference::kExact : Reference::kQuantizedActivations, x.f32, w, bias_mode ? &b.f32 : nullptr, T);
  const float r = static_cast<float>(rms(ref));
  const std::string path = gemv ? (T <= kFp8GemvMaxTokens ? "gemv" : "gemv mma") : std::string("gemm ") + gemm_name(cuda_test::context().options.fp8_gemm);
  const std::string what = path + " T=" + std::to_string(T) + " N=" +
                           std::to_string(N) + " K=" + std::to_string(K) + " out=" + std::string(dtype_name(out_t)) +
                           " bias=" + std::to_string(bias_mode);
  if (gemv) {
    EXPECT_LE(cuda_test::nmse(got, ref), bf ? 1e-5 : 1e-9) << what;
    cuda_test::expect_close(got, ref, (bf ? 1e-2f : 1e-4f) * r, bf ? 5e-3f : 1e-5f, what);
  } else {
    EXPECT_LE(cuda_test::nmse(got, ref), bf ? 1e-5 : 1e-7) << what;
    cuda_test::expect_close(got, ref, (bf ? 1e-2f : 2e-3f) * r, bf ? 5e-3f : 2e-3f, what);
    const std::vector<float> exact = reference(Reference::kExact, x.f32, w, bias_mode ? &b.f32 : nullptr, T);
    const double e = cuda_test::nmse(got, exact);
    EXPECT_LE(e, 4e-3) << what << " vs the unquantized activations";
    std::printf("%s: NMSE vs unquantized activations %.2e\n", what.c_str(), e);
  }
  return d_out.download<uint8_t>();
}

TEST(CudaFp8Linear, GemvMatchesTheExactReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(31);
  for (const int64_t T : {1, 2, 3, 4, 5, 8, 9, 13, 16}) {  // the FMA GEMV to 4 rows, then the tensor-core one
    check_linear_fp8(T, 128, 128, DType::kBF16, 0, rng);
    check_linear_fp8(T, 256, 640, DType::kF32, 2, rng);     // K % 512 != 0: idle lanes on the last step
    check_linear_fp8(T, 384, 1152, DType::kBF16, 1, rng);
    check_linear_fp8(T, 1024, 3072, DType::kF32, 0, rng);   // Qwen3-0.6B down_proj
    check_linear_fp8(T, 6144, 4096, DType::kBF16, 0, rng);  // Qwen3-8B qkv_proj
  }
}

// out [T, N] = x [T, K] @ W^T with W dequantized to f32 on the host (dequantize_fp8_run: edge blocks too), in f64.
std::vector<float> dequantized_reference(const HostFp8Weight& w, const std::vector<float>& x, int64_t T) {
  std::vector<float> wf(static_cast<size_t>(w.n * w.k));
  dequantize_fp8_run(w.codes.data(), w.scale.data(), w.k, 0, w.n * w.k, wf.data());
  std::vector<float> ref(static_cast<size_t>(T * w.n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < w.n; ++r) {
      double sum = 0;
      for (int64_t k = 0; k < w.k; ++k)
        sum += double{wf[static_cast<size_t>(r * w.k + k)]} * x[static_cast<size_t>(t * w.k + k)];
      ref[static_cast<size_t>(t * w.n + r)] = static_cast<float>(sum);
    }
  return ref;
}

std::string describe(const cuda_ops::Fp8GemvConfig& c) {
  if (c.unit_k == 0) return "register-fed";
  return "bulk unit_k " + std::to_string(c.unit_k) + " warps " + std::to_string(c.consumer_warps) + " units/CTA " +
         std::to_string(c.units_per_cta) + " (" + std::to_string(c.ctas) + " CTAs)";
}

// The launch shapes a test runs for W [N, K]: the register-fed kernel where its layout allows (N, K multiples of
// 128) and, on sm_90, the bulk kernel with each row-piece size and 4 and 8 consumer warps at one and two CTAs per
// SM, one unit per CTA (every tile of cpt > 1 units split across CTAs), 3 units per CTA (splits at odd places) and
// whole tiles per CTA.
std::vector<cuda_ops::Fp8GemvConfig> gemv_configs(int64_t N, int64_t K) {
  std::vector<cuda_ops::Fp8GemvConfig> out;
  if (N % 128 == 0 && K % 128 == 0) out.push_back({});
  if (!cuda_ops::fp8_gemv_bulk_available(cuda_test::context())) return out;
  for (const int unit_k : {1024, 2048, 4096}) {
    for (const int warps : {4, 8}) {
      const int64_t cpt = (K + unit_k - 1) / unit_k, units = (N + 15) / 16 * cpt;
      for (const int per_sm : {1, 2})
        out.push_back(cuda_ops::fp8_gemv_bulk_config(N, K, unit_k, per_sm, cuda_test::context(), warps));
      for (const int64_t upc : {int64_t{1}, int64_t{3}, cpt}) {
        const cuda_ops::Fp8GemvConfig c{unit_k, static_cast<int>(upc), static_cast<int>((units + upc - 1) / upc),
                                        warps};
        if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
      }
    }
  }
  return out;
}

// Every launch shape of gemv_configs on fresh random inputs vs dequantized_reference: bias and out dtype vary with
// the shape (none / bf16 / f32 bias, bf16 / f32 out). Tolerances as the bf16 gemv's: NMSE <= 1e-5 / per element
// |err| <= 1e-2 rms + 5e-3 |ref| (bf16 out), NMSE <= 1e-9 / 1e-4 rms + 1e-5 |ref| (f32 out). Every element is
// written (NaN poison) and a second run of each shape is bit for bit the first (fixed summation order).
void check_gemv_kernels(int64_t T, int64_t N, int64_t K, std::mt19937& rng) {
  HostFp8Weight w = random_fp8_weight(N, K, rng, N >= 128 && K >= 128);
  const DeviceFp8Weight dw(w);
  auto x = cuda_test::random_bf16(static_cast<size_t>(T * K), rng, -2.0f, 2.0f);
  auto b = cuda_test::random_bf16(static_cast<size_t>(N), rng, -1.0f, 1.0f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_b16(DType::kBF16, {N}, b.bits), d_b32(DType::kF32, {N}, b.f32);
  const std::vector<float> plain = dequantized_reference(w, x.f32, T);
  const float r = static_cast<float>(rms(plain));
  int i = 0;
  for (const cuda_ops::Fp8GemvConfig& c : gemv_configs(N, K)) {
    const int bias_mode = i % 3;
    const DType out_t = (i / 3) % 2 == 0 ? DType::kBF16 : DType::kF32;
    ++i;
    const bool bf = out_t == DType::kBF16;
    std::vector<float> ref = plain;
    if (bias_mode != 0)
      for (int64_t j = 0; j < T * N; ++j) ref[static_cast<size_t>(j)] += b.f32[static_cast<size_t>(j % N)];
    DeviceTensor d_out(out_t, {T, N});
    const TensorView bias = bias_mode == 0 ? TensorView() : bias_mode == 1 ? d_b16.view() : d_b32.view();
    auto run = [&] {
      d_out.fill_bytes(0xff);  // NaN poison: every element must be written
      cuda_ops::fp8_gemv(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), bias, cuda_test::on(), &c);
      CUDA_CHECK(cudaGetLastError());
      return d_out.download<uint8_t>();
    };
    const std::vector<uint8_t> first = run();
    const std::string what = describe(c) + " T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" +
                             std::to_string(K) + " out=" + std::string(dtype_name(out_t)) + " bias=" +
                             std::to_string(bias_mode);
    EXPECT_EQ(run(), first) << what << ": not deterministic";
    const std::vector<float> got = d_out.download_f32();
    EXPECT_LE(cuda_test::nmse(got, ref), bf ? 1e-5 : 1e-9) << what;
    cuda_test::expect_close(got, ref, (bf ? 1e-2f : 1e-4f) * r, bf ? 5e-3f : 1e-5f, what);
  }
}

// Both one-token GEMV kernels (fp8_gemv; T = 1 .. kFp8GemvMaxTokens) and every bulk launch shape. Shapes: N not a multiple of 16
// (17, 200, 1000: the bulk kernel only; ops::linear_fp8 refuses N, K off multiples of 128, the register-fed kernel
// too), K at and around the unit and block boundaries (128, 1040 = 8 x 128 + 16, 2048, 2064, 4096, 12288), the
// Qwen3-0.6B qkv shape.
TEST(CudaFp8Linear, GemvKernelsMatchTheDequantizedReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(34);
  for (int64_t T = 1; T <= kFp8GemvMaxTokens; ++T) {
    for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{
             {128, 128}, {200, 1040}, {17, 2048}, {1000, 2064}, {384, 4096}, {128, 12288}, {4096, 1024}})
      check_gemv_kernels(T, N, K, rng);
  }
}

// fp8_gemv_gate_up_silu (gate and up rows in one register-fed CTA, one token) is bit for bit the register-fed
// fp8_gemv into gate_up followed by silu_mul (shapes where that launch splits K 4 ways at most, as the fused one
// does); ops::linear_fp8_silu (that kernel for weights under kFp8BulkMinBytes, the bulk-copy fp8_gemv + silu_mul
// above) is close to the CPU op (f64 sums, f32 gate and up: the GPU's bf16 roundings of gate, up and the
// activation, ~2^-9 each, are the difference: NMSE <= 1e-4, per element 2e-2 rms + 1e-2 |ref|). Shapes: I = 128
// (one gate and one up block), K off multiples of 512 (idle lanes), the Qwen3-0.6B gate_up (two K slices), a 4-slice
// one (I = 2048, K = 3072), the 8B gate_up (the op's bulk-copy pair). More rows take linear_fp8 + silu_mul:
// checked against the CPU op at 3 rows.
TEST(CudaFp8Linear, GateUpSiluMatchesTheUnfusedPair) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(36);
  for (const auto& [T, I, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 128, 128}, {1, 384, 640}, {1, 3072, 1024}, {1, 2048, 3072}, {1, 12288, 4096}, {3, 384, 640}}) {
    const int64_t N = 2 * I;
    HostFp8Weight w = random_fp8_weight(N, K, rng);
    const DeviceFp8Weight dw(w);
    auto x = cuda_test::random_bf16(static_cast<size_t>(T * K), rng, -2.0f, 2.0f);
    DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_gate_up(DType::kBF16, {T, N}), d_act(DType::kBF16, {T, I}),
        d_ref(DType::kBF16, {T, I});
    const std::string what = "T=" + std::to_string(T) + " I=" + std::to_string(I) + " K=" + std::to_string(K);
    if (T <= kFp8GemvMaxTokens) {
      d_act.fill_bytes(0xff);  // NaN poison: every element must be written
      cuda_ops::fp8_gemv_gate_up_silu(d_act.view(), d_x.view(), dw.codes.view(), dw.scale.view(), cuda_test::on());
      const cuda_ops::Fp8GemvConfig registers{};
      cuda_ops::fp8_gemv(d_gate_up.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), cuda_test::on(),
                         &registers);
      cuda_ops::silu_mul(d_ref.view(), d_gate_up.view(), cuda_test::on());
      CUDA_CHECK(cudaGetLastError());
      EXPECT_EQ(d_act.download<uint8_t>(), d_ref.download<uint8_t>()) << what << ": not the unfused pair's bits";
    }
    d_act.fill_bytes(0xff);
    ops::linear_fp8_silu(d_act.view(), d_x.view(), dw.codes.view(), dw.scale.view(), d_gate_up.view(),
                         cuda_test::on());
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> gate_up(static_cast<size_t>(T * N)), act(static_cast<size_t>(T * I));
    ops::linear_fp8_silu(TensorView(act.data(), DType::kF32, Shape{T, I}), TensorView(x.f32.data(), DType::kF32,
                         Shape{T, K}), host_codes(w), host_scale(w), TensorView(gate_up.data(), DType::kF32, Shape{T, N}));
    const std::vector<float> got = d_act.download_f32();
    EXPECT_LE(cuda_test::nmse(got, act), 1e-4) << what;
    cuda_test::expect_close(got, act, 2e-2f * static_cast<float>(rms(act)), 1e-2f, what);
  }
}

TEST(CudaFp8Linear, GemvRefusesLayoutsItCannotRun) {  // both GEMVs
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(35);
  HostFp8Weight w = random_fp8_weight(200, 1040, rng);
  const DeviceFp8Weight dw(w);
  DeviceTensor x(DType::kBF16, {1, 1040}), out(DType::kBF16, {1, 200});
  const cuda_ops::Fp8GemvConfig registers{};
  testing::expect_error([&] { cuda_ops::fp8_gemv(out.view(), x.view(), dw.codes.view(), dw.scale.view(), TensorView(),
                                                 cuda_test::on(), &registers); },
                        {"fp8_gemv", "register-fed", "multiples of 128"});
  if (!cuda_ops::fp8_gemv_bulk_available(cuda_test::context())) return;
  const cuda_ops::Fp8GemvConfig bulk = cuda_ops::fp8_gemv_bulk_config(200, 1040, 2048, 1, cuda_test::context());
  DeviceTensor bad_scale(DType::kF32, {1, 9});
  testing::expect_error([&] { cuda_ops::fp8_gemv(out.view(), x.view(), dw.codes.view(), bad_scale.view(), TensorView(),
                                                 cuda_test::on(), &bulk); },
                        {"fp8_gemv (bulk)", "weight_scale", "[2, 9]"});
  DeviceTensor x_odd(DType::kBF16, {1, 1048}), w_odd(DType::kF8E4M3, {200, 1048}), s_odd(DType::kF32, {2, 9});
  testing::expect_error([&] { cuda_ops::fp8_gemv(out.view(), x_odd.view(), w_odd.view(), s_odd.view(), TensorView(),
                                                 cuda_test::on(), &bulk); },
                        {"fp8_gemv (bulk)", "1048", "multiple of 16"});
  const cuda_ops::Fp8GemvConfig odd_unit{512, 1, 1};
  testing::expect_error([&] { cuda_ops::fp8_gemv(out.view(), x.view(), dw.codes.view(), dw.scale.view(), TensorView(),
                                                 cuda_test::on(), &odd_unit); },
                        {"fp8_gemv (bulk)", "unit_k 512"});
  testing::expect_error([&] { cuda_ops::fp8_gemv_bulk_config(200, 1040, 3000, 1, cuda_test::context()); },
                        {"fp8_gemv_bulk_config", "unit_k 3000"});
  const cuda_ops::Fp8GemvConfig six_warps{2048, 1, 13, 6};
  testing::expect_error([&] { cuda_ops::fp8_gemv(out.view(), x.view(), dw.codes.view(), dw.scale.view(), TensorView(),
                                                 cuda_test::on(), &six_warps); },
                        {"fp8_gemv (bulk)", "consumer_warps 6"});
  // The tensor-core GEMV: 1 to kFp8MmaGemvMaxTokens rows, N and K multiples of 128, the scales' shape.
  HostFp8Weight w2 = random_fp8_weight(256, 256, rng);
  const DeviceFp8Weight dw2(w2);
  DeviceTensor x17(DType::kBF16, {17, 256}), out17(DType::kBF16, {17, 256}), x2(DType::kBF16, {2, 256}),
      out2(DType::kBF16, {2, 256}), scale_1x2(DType::kF32, {1, 2});
  testing::expect_error([&] { cuda_ops::fp8_gemv_mma(out17.view(), x17.view(), dw2.codes.view(), dw2.scale.view(),
                                                     TensorView(), cuda_test::on()); },
                        {"fp8_gemv_mma", "17 rows", "1 to 16"});
  testing::expect_error([&] { cuda_ops::fp8_gemv_mma(out.view(), x.view(), dw.codes.view(), dw.scale.view(),
                                                     TensorView(), cuda_test::on()); },
                        {"fp8_gemv_mma", "[200, 1040]", "multiples of 128"});
  testing::expect_error([&] { cuda_ops::fp8_gemv_mma(out2.view(), x2.view(), dw2.codes.view(), scale_1x2.view(),
                                                     TensorView(), cuda_test::on()); },
                        {"fp8_gemv_mma", "weight_scale", "[2, 2]"});
}

TEST(CudaFp8Linear, ActivationQuantizationMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(32);
  for (auto [T, K] : {std::pair<int64_t, int64_t>{1, 128}, {5, 384}, {17, 1024}, {1000, 256}}) {
    auto x = cuda_test::random_bf16(static_cast<size_t>(T * K), rng, -3.0f, 3.0f);
    for (int64_t k = 0; k < 128; ++k) x.bits[k] = 0, x.f32[k] = 0.0f;  // an all-zero group: scale 1
    if (T * K > 130) x.bits[130] = f32_to_bf16(-1e4f), x.f32[130] = bf16_to_f32(x.bits[130]);  // a large one
    DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), codes(DType::kF8E4M3, {T, K}), scales(DType::kF32, {T, K / 128});
    DeviceTensor codes_k(DType::kF8E4M3, {T, K}), scales_k(DType::kF32, {K / 128, T});
    cuda_ops::fp8_quantize_activations(codes.view(), scales.view(), d_x.view(), cuda_test::on());
    cuda_ops::fp8_quantize_activations(codes_k.view(), scales_k.view(), d_x.view(), cuda_test::on(),
                                       cuda_ops::Fp8ScaleLayout::kKBlockMajor);
    std::vector<uint8_t> want_codes(static_cast<size_t>(T * K));
    std::vector<float> want_scales(static_cast<size_t>(T * K / 128)), want_k(want_scales.size());
    for (int64_t t = 0; t < T; ++t)
      quantize_fp8_blocks(x.f32.data() + t * K, 1, K, want_codes.data() + t * K, want_scales.data() + t * (K / 128));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < K / 128; ++b)
        want_k[static_cast<size_t>(b * T + t)] = want_scales[static_cast<size_t>(t * (K / 128) + b)];
    EXPECT_EQ(codes.download<uint8_t>(), want_codes) << "T " << T << " K " << K;
    EXPECT_EQ(scales.download<float>(), want_scales) << "T " << T << " K " << K;
    EXPECT_EQ(codes_k.download<uint8_t>(), want_codes) << "k-block-major: T " << T << " K " << K;
    EXPECT_EQ(scales_k.download<float>(), want_k) << "k-block-major: T " << T << " K " << K;
  }
}

TEST(CudaFp8Linear, GemmMatchesTheQuantizedActivationReference) {
  SKIP_WITHOUT_CUDA();
  if (!cuda_ops::fp8_tensor_cores_available(cuda_test::context())) GTEST_SKIP() << "no fp8 tensor cores (sm_89+)";
  std::mt19937 rng(33);
  for (Fp8Gemm gemm : {Fp8Gemm::kMmaSync, Fp8Gemm::kCublasLt}) {
    const Fp8GemmGuard guard(gemm);
    for (int64_t T : {5, 16, 17, 63, 64, 65, 129, 1000}) {
      check_linear_fp8(T, 128, 128, DType::kBF16, 0, rng);   // cuBLASLt: K / 128 = 1, the mma.sync kernel runs
      check_linear_fp8(T, 256, 384, DType::kF32, 2, rng);    // bias: the mma.sync kernel
      check_linear_fp8(T, 1024, 1024, DType::kBF16, 1, rng);
      check_linear_fp8(T, 512, 1024, DType::kBF16, 0, rng);  // cuBLASLt where it runs (sm_90)
      check_linear_fp8(T, 384, 512, DType::kF32, 0, rng);
    }
    check_linear_fp8(257, 4096, 1024, DType::kF32, 0, rng);
    check_linear_fp8(2050, 128, 16384, DType::kBF16, 1, rng);  // two chunks (32 MiB of codes: 2048 rows at this K)
    check_linear_fp8(2050, 128, 16384, DType::kBF16, 0, rng);  // two chunks, no bias (the second: 2 rows)
    // Qwen3-8B's down_proj K: chunks of 2688 rows (whole 128-row tiles), then 42 = 32 through cuBLASLt + 10.
    check_linear_fp8(2730, 128, 12288, DType::kBF16, 0, rng);
  }
}

// Host-quantized activations for the GEMMs alone: x [M, K] (bf16 values), quantize_fp8_blocks per row (what
// fp8_quantize_activations computes bit for bit), the scales row-major and k-block-major.
struct HostQuantized {
  std::vector<float> x;
  std::vector<uint8_t> codes;             // [M, K]
  std::vector<float> scales, k_major;     // [M, K / 128], [K / 128, M]
};

HostQuantized quantize_on_host(int64_t M, int64_t K, std::mt19937& rng) {
  HostQuantized q;
  q.x = cuda_test::random_bf16(static_cast<size_t>(M * K), rng, -2.0f, 2.0f).f32;
  q.codes.resize(static_cast<size_t>(M * K));
  q.scales.resize(static_cast<size_t>(M * (K / 128)));
  q.k_major.resize(q.scales.size());
  for (int64_t m = 0; m < M; ++m)
    quantize_fp8_blocks(q.x.data() + m * K, 1, K, q.codes.data() + m * K, q.scales.data() + m * (K / 128));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < K / 128; ++b)
      q.k_major[static_cast<size_t>(b * M + m)] = q.scales[static_cast<size_t>(m * (K / 128) + b)];
  return q;
}

TEST(CudaFp8Linear, CublasLtGemmMatchesTheQuantizedActivationReference) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() != 9) GTEST_SKIP() << "cuBLASLt's block-scaled fp8 matmul is Hopper's (sm_90)";
  std::mt19937 rng(34);
  // ops::linear_fp8 gives cuBLASLt whole 16-row groups only (the rest runs the mma.sync kernel).
  for (int64_t M : {16, 128, 1008, 2688})
    for (auto [N, K] : {std::pair<int64_t, int64_t>{128, 512}, {384, 1024}, {1024, 3072}})
      for (DType out_t : {DType::kBF16, DType::kF32}) {
        HostFp8Weight w = random_fp8_weight(N, K, rng, true);
        const DeviceFp8Weight dw(w);
        HostQuantized q = quantize_on_host(M, K, rng);
        DeviceTensor codes(DType::kF8E4M3, {M, K}, q.codes), scales(DType::kF32, {K / 128, M}, q.k_major);
        DeviceTensor out(out_t, {M, N});
        out.fill_bytes(0xff);  // NaN poison: every element must be written
        const bool bf = out_t == DType::kBF16;
        const std::string what = "cublaslt M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                                 std::to_string(K) + " out=" + std::string(dtype_name(out_t));
        if (!cuda_ops::fp8_gemm_cublaslt_supported(out.view(), codes.view(), scales.view(), dw.codes.view(),
                                                   dw.scale.view(), cuda_test::on())) {
          // ops::linear_fp8 then runs the mma.sync kernel: acceptable for a handful of rows or the f32 output the
          // engine does not use, a failure for a prefill-sized bf16 GEMM.
          if (bf) ADD_FAILURE() << what << ": cuBLASLt offered no algorithm";
          std::printf("%s: cuBLASLt offers no algorithm (the mma.sync kernel runs it)\n", what.c_str());
          continue;
        }
        cuda_ops::fp8_gemm_cublaslt(out.view(), codes.view(), scales.view(), dw.codes.view(), dw.scale.view(),
                                    cuda_test::on());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = out.download_f32();
        const std::vector<float> ref = reference(Reference::kQuantizedActivations, q.x, w, nullptr, M);
        const float r = static_cast<float>(rms(ref));
        EXPECT_LE(cuda_test::nmse(got, ref), bf ? 1e-5 : 1e-7) << what;
        cuda_test::expect_close(got, ref, (bf ? 1e-2f : 2e-3f) * r, bf ? 5e-3f : 2e-3f, what);
        std::printf("%s: NMSE vs the quantized-activation reference %.2e\n", what.c_str(), cuda_test::nmse(got, ref));
      }
}

TEST(CudaFp8Linear, CublasLtGemmRefusesWhatItCannotRun) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(35);
  const int64_t M = 64;
  // K / 128 = 3: cuBLASLt would read our unpadded weight scales with a row stride of 4 blocks.
  HostFp8Weight w = random_fp8_weight(256, 384, rng);
  const DeviceFp8Weight dw(w);
  DeviceTensor codes(DType::kF8E4M3, {M, 384}), scales(DType::kF32, {3, M}), out(DType::kBF16, {M, 256});
  EXPECT_FALSE(cuda_ops::fp8_gemm_cublaslt_supported(out.view(), codes.view(), scales.view(), dw.codes.view(),
                                                     dw.scale.view(), cuda_test::on()));
  testing::expect_error([&] { cuda_ops::fp8_gemm_cublaslt(out.view(), codes.view(), scales.view(), dw.codes.view(),
                                                          dw.scale.view(), cuda_test::on()); },
                        {"fp8_gemm_cublaslt", "[64, 384]", "[256, 384]"});
  HostFp8Weight w4 = random_fp8_weight(256, 512, rng);
  const DeviceFp8Weight dw4(w4);
  DeviceTensor codes4(DType::kF8E4M3, {M, 512}), row_major(DType::kF32, {M, 4}), out16(DType::kF16, {M, 256});
  EXPECT_FALSE(cuda_ops::fp8_gemm_cublaslt_supported(out.view(), codes4.view(), row_major.view(), dw4.codes.view(),
                                                     dw4.scale.view(), cuda_test::on()))
      << "row-major activation scales";
  DeviceTensor k_major(DType::kF32, {4, M});
  EXPECT_FALSE(cuda_ops::fp8_gemm_cublaslt_supported(out16.view(), codes4.view(), k_major.view(), dw4.codes.view(),
                                                     dw4.scale.view(), cuda_test::on()))
      << "f16 out";
  if (cuda_test::device_major() != 9) {
    EXPECT_FALSE(cuda_ops::fp8_gemm_cublaslt_supported(out.view(), codes4.view(), k_major.view(), dw4.codes.view(),
                                                       dw4.scale.view(), cuda_test::on()))
        << "not an sm_90 device";
  }
}

TEST(CudaFp8Linear, DeterministicAndRefusesWhatItCannotRun) {
  SKIP_WITHOUT_CUDA();
  for (int64_t T : {int64_t{3}, int64_t{11}, int64_t{300}}) {
    if (T > kFp8MmaGemvMaxTokens && !cuda_ops::fp8_tensor_cores_available(cuda_test::context())) continue;
    std::mt19937 a(7), b(7);
    EXPECT_EQ(check_linear_fp8(T, 512, 1024, DType::kBF16, 1, a), check_linear_fp8(T, 512, 1024, DType::kBF16, 1, b));
  }
  std::mt19937 rng(8);
  HostFp8Weight w = random_fp8_weight(256, 256, rng);
  const DeviceFp8Weight dw(w);
  DeviceTensor x32(DType::kF32, {2, 256}), out(DType::kBF16, {2, 256});
  testing::expect_error([&] { ops::linear_fp8(out.view(), x32.view(), dw.codes.view(), dw.scale.view(), TensorView(),
                                              cuda_test::on()); }, {"linear_fp8", "BF16", "F32"});
  DeviceTensor x(DType::kBF16, {2, 192}), w_odd(DType::kF8E4M3, {256, 192}), s_odd(DType::kF32, {2, 2});
  testing::expect_error([&] { ops::linear_fp8(out.view(), x.view(), w_odd.view(), s_odd.view(), TensorView(),
                                              cuda_test::on()); }, {"linear_fp8", "[256, 192]", "multiples of 128"});
}

// us per call of `call`, replayed from a graph of 20 back-to-back calls on `st` (median of 20 replays).
template <typename F>
float graph_us_per_call(cudaStream_t st, F&& call) {
  cudaGraphExec_t g = cuda_test::warm_up_and_capture(st, [&] {
    for (int i = 0; i < 20; ++i) call();
  });
  const float us = cuda_test::graph_replay_ms(g, st, 20)[10] * 1000.0f / 20;
  CUDA_CHECK(cudaGraphExecDestroy(g));
  return us;
}

// Decode-shaped projections (T = 1) of Qwen3-0.6B and Qwen3-8B, each replayed from a graph of 20 back-to-back
// calls (median of 20 replays): ops::linear_fp8 (fp8_gemv's default pick), each fp8 GEMV launch shape (the
// register-fed kernel; on sm_90 the bulk kernel with 4 and 8 consumer warps and 1, 2 and 4 KB row pieces at one
// and two CTAs per SM, 4 KB at one: its ring takes 128 KB) and the bf16 linear (its tuned gemv); us per call and
// the weight stream's GB/s.
TEST(CudaFp8Bench, DISABLED_DecodeShapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(40);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  const std::vector<std::tuple<const char*, int64_t, int64_t>> shapes = {
      {"0.6B qkv", 4096, 1024}, {"0.6B o", 1024, 2048}, {"0.6B gate_up", 6144, 1024}, {"0.6B down", 1024, 3072},
      {"8B qkv", 6144, 4096},   {"8B o", 4096, 4096},   {"8B gate_up", 24576, 4096}, {"8B down", 4096, 12288}};
  const bool bulk = cuda_ops::fp8_gemv_bulk_available(cuda_test::context());
  for (const auto& [name, N, K] : shapes) {
    HostFp8Weight w = random_fp8_weight(N, K, rng);
    const DeviceFp8Weight dw(w);
    auto wb = cuda_test::random_bf16(static_cast<size_t>(N * K), rng, -0.05f, 0.05f);
    auto x = cuda_test::random_bf16(static_cast<size_t>(K), rng);
    DeviceTensor d_w(DType::kBF16, {N, K}, wb.bits), d_x(DType::kBF16, {1, K}, x.bits), d_out(DType::kBF16, {1, N});
    const ops::Stream s = cuda_test::on(st);
    auto us_per_call = [&](auto&& call) { return graph_us_per_call(st, call); };
    const float b = us_per_call([&] { ops::linear(d_out.view(), d_x.view(), d_w.view(), TensorView(), s); });
    auto report = [&](const std::string& what, float us) {
      std::printf("%-13s N %6lld K %6lld %-40s %7.2f us (%5.0f GB/s)  /bf16 %.2f\n", name, static_cast<long long>(N),
                  static_cast<long long>(K), what.c_str(), us, static_cast<double>(N * K) / us / 1e3, us / b);
    };
    std::printf("%-13s N %6lld K %6lld %-40s %7.2f us (%5.0f GB/s)\n", name, static_cast<long long>(N),
                static_cast<long long>(K), "bf16 linear", b, 2.0 * static_cast<double>(N * K) / b / 1e3);
    report("fp8 linear (default: " + describe(cuda_ops::fp8_gemv_default_config(N, K, cuda_test::context())) + ")",
           us_per_call([&] {
             ops::linear_fp8(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), s);
           }));
    std::vector<cuda_ops::Fp8GemvConfig> configs{cuda_ops::Fp8GemvConfig{}};
    if (bulk) {
      for (const int warps : {4, 8})
        for (const auto& [unit_k, per_sm] : std::vector<std::pair<int, int>>{{1024, 1}, {1024, 2}, {2048, 1},
                                                                             {2048, 2}, {4096, 1}})
          configs.push_back(cuda_ops::fp8_gemv_bulk_config(N, K, unit_k, per_sm, cuda_test::context(), warps));
    }
    for (const cuda_ops::Fp8GemvConfig& c : configs)
      report(describe(c), us_per_call([&] {
               cuda_ops::fp8_gemv(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), s, &c);
             }));
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

// Decode batches (T = 1 .. 16) of the Qwen3-8B and Qwen3-30B-A3B attention projections, each replayed from a graph
// of 20 back-to-back calls (median of 20 replays): the bf16 linear, ops::linear_fp8 (its route: the FMA GEMV to
// kFp8GemvMaxTokens rows, the tensor-core GEMV to kFp8MmaGemvMaxTokens), the FMA GEMV's default shape where it
// runs, the tensor-core GEMV at every T, and the route past kFp8MmaGemvMaxTokens (activation quantization + GEMM,
// as ops::linear_fp8 takes 17 rows and more) on the same rows; us per call.
TEST(CudaFp8Bench, DISABLED_DecodeBatchShapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(42);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  const std::vector<std::tuple<const char*, int64_t, int64_t>> shapes = {
      {"8B qkv", 6144, 4096}, {"8B o", 4096, 4096}, {"8B gate_up", 24576, 4096}, {"8B down", 4096, 12288},
      {"30B-A3B qkv", 5120, 2048}, {"30B-A3B o", 2048, 4096}};
  for (const auto& [name, N, K] : shapes) {
    HostFp8Weight w = random_fp8_weight(N, K, rng);
    const DeviceFp8Weight dw(w);
    auto wb = cuda_test::random_bf16(static_cast<size_t>(N * K), rng, -0.05f, 0.05f);
    DeviceTensor d_w(DType::kBF16, {N, K}, wb.bits);
    const ops::Stream s = cuda_test::on(st);
    for (const int64_t T : {1, 2, 4, 5, 8, 12, 16}) {
      auto x = cuda_test::random_bf16(static_cast<size_t>(T * K), rng);
      DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_out(DType::kBF16, {T, N});
      DeviceTensor codes(DType::kF8E4M3, {T, K}), scales(DType::kF32, {T, K / 128});
      auto us_per_call = [&](auto&& call) { return graph_us_per_call(st, call); };
      const float b = us_per_call([&] { ops::linear(d_out.view(), d_x.view(), d_w.view(), TensorView(), s); });
      const float route = us_per_call([&] {
        ops::linear_fp8(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), s);
      });
      const float mma = us_per_call([&] {
        cuda_ops::fp8_gemv_mma(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), s);
      });
      const float fma = T <= kFp8GemvMaxTokens ? us_per_call([&] {
        cuda_ops::fp8_gemv(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), s);
      }) : 0.f;
      const float gemm = cuda_ops::fp8_tensor_cores_available(cuda_test::context()) ? us_per_call([&] {
        cuda_ops::fp8_quantize_activations(codes.view(), scales.view(), d_x.view(), s);
        cuda_ops::fp8_gemm(d_out.view(), codes.view(), scales.view(), dw.codes.view(), dw.scale.view(), TensorView(),
                           s);
      }) : 0.f;
      std::printf("%-12s N %6lld K %6lld T %2lld: bf16 %7.2f us | fp8 linear %7.2f (%.2fx) | fma gemv %7.2f | mma "
                  "gemv %7.2f (%.2fx) | quantize + gemm %7.2f\n",
                  name, static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(T), b, route,
                  route / b, fma, mma, mma / b, gemm);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

// Prefill-shaped GEMMs (8192 rows) of Qwen3-8B: the activation quantization, then each GEMM alone on its
// quantized activations (the mma.sync kernel, cuBLASLt's block-scaled matmul), the bf16 linear (cuBLASLt) and
// ops::linear_fp8 whole under each KernelOptions::fp8_gemm; ms (median of 10) and TFLOP/s.
TEST(CudaFp8Bench, DISABLED_PrefillShapes) {
  SKIP_WITHOUT_CUDA();
  const bool mma = cuda_ops::fp8_tensor_cores_available(cuda_test::context());
  std::mt19937 rng(41);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  const int64_t T = 8192;
  for (const auto& [name, N, K] : std::vector<std::tuple<const char*, int64_t, int64_t>>{
           {"8B qkv", 6144, 4096}, {"8B o", 4096, 4096}, {"8B gate_up", 24576, 4096}, {"8B down", 4096, 12288}}) {
    HostFp8Weight w = random_fp8_weight(N, K, rng);
    const DeviceFp8Weight dw(w);
    auto wb = cuda_test::random_bf16(static_cast<size_t>(N * K), rng, -0.05f, 0.05f);
    auto x = cuda_test::random_bf16(static_cast<size_t>(T * K), rng);
    DeviceTensor d_w(DType::kBF16, {N, K}, wb.bits), d_x(DType::kBF16, {T, K}, x.bits), d_out(DType::kBF16, {T, N});
    DeviceTensor codes(DType::kF8E4M3, {T, K}), rows(DType::kF32, {T, K / 128}), k_major(DType::kF32, {K / 128, T});
    const ops::Stream s = cuda_test::on(st);
    const double flop = 2.0 * static_cast<double>(T * N * K);
    auto report = [&](const char* what, auto&& fn) {
      fn();  // first use: choices, workspaces
      const float ms = cuda_test::time_each_ms(st, 10, fn)[5];
      std::printf("%-11s T %lld N %6lld K %6lld %-22s %8.3f ms  %5.0f TFLOP/s\n", name, static_cast<long long>(T),
                  static_cast<long long>(N), static_cast<long long>(K), what, ms, flop / ms / 1e9);
    };
    report("quantize (k-major)", [&] {
      cuda_ops::fp8_quantize_activations(codes.view(), k_major.view(), d_x.view(), s,
                                         cuda_ops::Fp8ScaleLayout::kKBlockMajor);
    });
    cuda_ops::fp8_quantize_activations(codes.view(), rows.view(), d_x.view(), s);
    if (mma)
      report("gemm mma.sync", [&] {
        cuda_ops::fp8_gemm(d_out.view(), codes.view(), rows.view(), dw.codes.view(), dw.scale.view(), TensorView(), s);
      });
    if (cuda_ops::fp8_gemm_cublaslt_supported(d_out.view(), codes.view(), k_major.view(), dw.codes.view(),
                                              dw.scale.view(), s))
      report("gemm cublaslt", [&] {
        cuda_ops::fp8_gemm_cublaslt(d_out.view(), codes.view(), k_major.view(), dw.codes.view(), dw.scale.view(), s);
      });
    report("bf16 linear", [&] { ops::linear(d_out.view(), d_x.view(), d_w.view(), TensorView(), s); });
    for (Fp8Gemm gemm : {Fp8Gemm::kMmaSync, Fp8Gemm::kCublasLt}) {
      const Fp8GemmGuard guard(gemm);
      report(gemm == Fp8Gemm::kCublasLt ? "linear_fp8 cublaslt" : "linear_fp8 mma", [&] {
        ops::linear_fp8(d_out.view(), d_x.view(), dw.codes.view(), dw.scale.view(), TensorView(), s);
      });
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace nanovllm
