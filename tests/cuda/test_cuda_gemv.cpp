// CUDA gemv (small-T linear, gemv.cu) against the CPU reference linear on identical bf16 values, the
// dispatch through cuda_ops::linear, the split-K path, determinism; plus a DISABLED_ benchmark of the
// decode shapes (gemv vs cuBLASLt) and one of the prologue and rms_norm at decode and prefill sizes.
// Accuracy as in test_cuda_linear.cpp: bf16 products are exact in fp32, so the differences are the fp32
// summation order and the final output rounding. NMSE <= 1e-5 (bf16 out) / 1e-9 (f32 out); per element
// |err| <= 1e-2 rms(ref) + 5e-3 |ref| (bf16) or 1e-4 rms(ref) + 1e-5 |ref| (f32).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <tuple>

#include "cuda_bench_util.h"
#include "cuda_test_util.h"

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/gemv.cuh"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::graph_us_per_launch;
using cuda_test::Shape3;
using cuda_test::weight_copies;
using cuda_test::graph_replay_ms;
using cuda_test::random_bf16;

enum class Path { kGemv, kLinear };

// bias_mode: 0 none, 1 bf16 bias, 2 f32 bias. Returns the raw output bytes (determinism checks).
std::vector<uint8_t> check_gemv(int64_t T, int64_t N, int64_t K, DType out_t, int bias_mode, std::mt19937& rng,
                                Path path = Path::kGemv, const cuda_ops::GemvConfig* cfg = nullptr) {
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  auto b = random_bf16(static_cast<size_t>(N), rng, -2.0f, 2.0f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(out_t, {T, N});
  d_out.fill_bytes(0xff);  // NaN poison: every element must be written
  std::vector<float> b_f32 = b.f32;
  DeviceTensor d_b = bias_mode == 2 ? DeviceTensor(DType::kF32, {N}, b_f32) : DeviceTensor(DType::kBF16, {N}, b.bits);
  const TensorView bias_view = bias_mode ? d_b.view() : TensorView();
  EXPECT_TRUE(cuda_ops::gemv_supported(d_out.view(), d_x.view(), d_w.view()));
  if (path == Path::kGemv) cuda_ops::gemv(d_out.view(), d_x.view(), d_w.view(), bias_view, cuda_test::on(), cfg);
  else cuda_ops::linear(d_out.view(), d_x.view(), d_w.view(), bias_view, cuda_test::on());
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu::linear(cuda_test::host_view(ref, {T, N}), cuda_test::host_view(x.f32, {T, K}),
              cuda_test::host_view(w.f32, {N, K}), bias_mode ? cuda_test::host_view(b_f32, {N}) : TensorView());
  const std::vector<float> got = d_out.download_f32();
  double ss = 0;
  for (float r : ref) ss += static_cast<double>(r) * r;
  const float rms = static_cast<float>(std::sqrt(ss / static_cast<double>(ref.size())));
  const bool bf = out_t == DType::kBF16;
  const cuda_ops::GemvConfig c = cfg != nullptr ? *cfg : cuda_ops::gemv_config(T, N, K, cuda_test::context());
  const std::string what = "gemv T=" + std::to_string(T) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " out=" + std::string(dtype_name(out_t)) + " bias=" + std::to_string(bias_mode) +
                           " RT=" + std::to_string(c.rows_tiles_per_cta) + " split=" + std::to_string(c.k_split) +
                           " stream=" + std::to_string(c.stream_steps) + " bulk=" + std::to_string(c.bulk_units);
  EXPECT_LE(cuda_test::nmse(got, ref), bf ? 1e-5 : 1e-9) << what;
  cuda_test::expect_close(got, ref, (bf ? 1e-2f : 1e-4f) * rms, bf ? 5e-3f : 1e-5f, what);
  return d_out.download<uint8_t>();
}

TEST(CudaGemv, MatchesReferenceSmallShapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(21);
  for (int64_t T : {1, 2, 3, 4, 7, 8, 15, 16}) {
    check_gemv(T, 1, 64, DType::kBF16, 0, rng);
    check_gemv(T, 7, 1024, DType::kBF16, 0, rng);
    check_gemv(T, 64, 64, DType::kBF16, 0, rng);
    check_gemv(T, 64, 72, DType::kF32, 0, rng);     // K % 128 != 0: partial last step
    check_gemv(T, 1000, 1024, DType::kF32, 0, rng);  // LM-head style fp32 output, N % 16 != 0
    check_gemv(T, 1000, 1000, DType::kBF16, 0, rng);
  }
}

TEST(CudaGemv, MatchesReferenceModelShapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(22);
  for (int64_t T : {1, 4, 16}) {
    check_gemv(T, 4096, 1024, DType::kBF16, 0, rng);
    check_gemv(T, 6144, 1024, DType::kBF16, 0, rng);
    check_gemv(T, 1024, 4096, DType::kBF16, 0, rng);
    check_gemv(T, 1000, 12288, DType::kBF16, 0, rng);
    check_gemv(T, 64, 12288, DType::kF32, 0, rng);
  }
  check_gemv(3, 4096, 4096, DType::kBF16, 0, rng);
}

TEST(CudaGemv, BiasInEitherDtype) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(23);
  for (int64_t T : {1, 3, 9, 16}) {
    for (DType out_t : {DType::kBF16, DType::kF32}) {
      check_gemv(T, 384, 256, out_t, 1, rng);
      check_gemv(T, 384, 256, out_t, 2, rng);
      check_gemv(T, 1000, 4096, out_t, 1, rng);  // split-K path with bias
    }
  }
}

// check_gemv with the default pick's launch shape for (T, N, K) but `row_tiles` / `k_split` forced.
std::vector<uint8_t> check_forced(int64_t T, int64_t N, int64_t K, DType out_t, int bias_mode, std::mt19937& rng,
                                  int row_tiles, int k_split) {
  const cuda_ops::GemvConfig c = cuda_ops::gemv_forced_config(T, N, K, cuda_test::context(), row_tiles, k_split);
  return check_gemv(T, N, K, out_t, bias_mode, rng, Path::kGemv, &c);
}

TEST(CudaGemv, ForcedSplitKAndDeterminism) {
  SKIP_WITHOUT_CUDA();
  for (int split : {2, 3, 7, 16}) {
    for (int64_t T : {1, 5, 16}) {
      const uint32_t seed = static_cast<uint32_t>(100 * split + T);
      std::mt19937 rng_a(seed), rng_b(seed);
      const auto a = check_forced(T, 1000, 2048, DType::kBF16, 1, rng_a, 0, split);
      const auto b = check_forced(T, 1000, 2048, DType::kBF16, 1, rng_b, 0, split);  // same inputs, counters reused
      EXPECT_EQ(a, b) << "split=" << split << " T=" << T << ": not bitwise reproducible";
      std::mt19937 rng(seed + 7);
      check_forced(T, 33, 1024, DType::kF32, 2, rng, 0, split);
    }
  }
  std::mt19937 rng(24);
  for (int rt : {2, 4, 8}) {  // several row tiles per CTA (K groups 8 / RT), with and without a K split
    for (int split : {0, 3}) {
      for (int64_t T : {1, 9, 16}) {
        check_forced(T, 1000, 1024, DType::kBF16, 1, rng, rt, split);
        check_forced(T, 200, 2056, DType::kF32, 0, rng, rt, split);
      }
    }
  }
}

// Stream-K (gemv_stream.cuh): tiles whole in one warp, split across 2..many warps, warps spanning several
// tiles, ragged K (K % 128 != 0) and N (N % 16 != 0), bias; bitwise reproducible with counters reused.
TEST(CudaGemv, ForcedStreamKAndDeterminism) {
  SKIP_WITHOUT_CUDA();
  auto check_stream = [](int64_t T, int64_t N, int64_t K, DType out_t, int bias_mode, std::mt19937& rng, int spw) {
    const cuda_ops::GemvConfig c = cuda_ops::gemv_stream_config(T, N, K, spw);
    return check_gemv(T, N, K, out_t, bias_mode, rng, Path::kGemv, &c);
  };
  for (int spw : {1, 2, 3, 5, 8, 40}) {
    for (int64_t T : {1, 5, 16}) {
      const uint32_t seed = static_cast<uint32_t>(1000 * spw + T);
      std::mt19937 rng_a(seed), rng_b(seed);
      const auto a = check_stream(T, 1000, 2048, DType::kBF16, 1, rng_a, spw);
      const auto b = check_stream(T, 1000, 2048, DType::kBF16, 1, rng_b, spw);
      EXPECT_EQ(a, b) << "stream steps=" << spw << " T=" << T << ": not bitwise reproducible";
      std::mt19937 rng(seed + 7);
      check_stream(T, 33, 1024, DType::kF32, 2, rng, spw);
      check_stream(T, 200, 2056, DType::kF32, 0, rng, spw);
      check_stream(T, 7, 72, DType::kBF16, 0, rng, spw);
    }
  }
}

// Bulk-copy kernel (gemv_bulk.cuh): tiles whole in one CTA, split across 2..many CTAs, CTAs spanning
// several tiles, more units than the 3-stage ring, ragged K (K % 1024 != 0) and N, bias, the fused silu;
// bitwise reproducible with counters reused.
TEST(CudaGemv, BulkUnitsPerCtaAndDeterminism) {
  SKIP_WITHOUT_CUDA();
  if (!cuda_ops::gemv_bulk_available(cuda_test::context())) GTEST_SKIP() << "bulk-copy gemv needs sm_90";
  for (const int64_t upc : {1, 2, 3, 5, 8, 40, 300}) {
    for (const int64_t T : {1, 5, 16}) {
      const uint32_t seed = static_cast<uint32_t>(1000 * upc + T);
      const cuda_ops::GemvConfig big = cuda_ops::gemv_bulk_config(1000, 2048, upc);
      std::mt19937 rng_a(seed), rng_b(seed);
      const auto a = check_gemv(T, 1000, 2048, DType::kBF16, 1, rng_a, Path::kGemv, &big);
      const auto b = check_gemv(T, 1000, 2048, DType::kBF16, 1, rng_b, Path::kGemv, &big);
      EXPECT_EQ(a, b) << "bulk units/CTA=" << upc << " T=" << T << ": not bitwise reproducible";
      std::mt19937 rng(seed + 7);
      for (const auto& [N, K, out, bias] : {std::tuple{33, 1024, DType::kF32, 2}, std::tuple{200, 2056, DType::kF32, 0},
                                            std::tuple{7, 72, DType::kBF16, 0}, std::tuple{129, 4104, DType::kBF16, 1}}) {
        const cuda_ops::GemvConfig c = cuda_ops::gemv_bulk_config(N, K, upc);
        check_gemv(T, N, K, out, bias, rng, Path::kGemv, &c);
      }
    }
  }
}

// Every launch shape the dispatch may time (row tiles, split-K, stream-K) against the CPU reference, on
// shapes with ragged K / N and the 8B qkv shape.
TEST(CudaGemv, EveryCandidateMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(26);
  struct Case { int64_t N, K; DType out; int bias; };
  for (const Case c : {Case{1000, 2048, DType::kBF16, 1}, Case{33, 1024, DType::kF32, 2}, Case{200, 2056, DType::kF32, 0},
                       Case{7, 72, DType::kBF16, 0}, Case{6144, 4096, DType::kBF16, 0}}) {
    for (const int64_t T : {1, 5, 16}) {
      for (const cuda_ops::GemvConfig& g : cuda_ops::gemv_candidates(T, c.N, c.K, cuda_test::context()))
        check_gemv(T, c.N, c.K, c.out, c.bias, rng, Path::kGemv, &g);
    }
  }
}

// The benchmark's cuBLASLt algorithms of every heuristic rank compute the same matmul (fp32 accumulation,
// summation order free: NMSE bound as for gemv).
TEST(CudaGemv, CublasRankedAlgorithmsMatchReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(27);
  const int64_t T = 64, N = 200, K = 1032;
  auto x = random_bf16(static_cast<size_t>(T * K), rng);
  auto w = random_bf16(static_cast<size_t>(N * K), rng, -0.5f, 0.5f);
  DeviceTensor d_x(DType::kBF16, {T, K}, x.bits), d_w(DType::kBF16, {N, K}, w.bits), d_out(DType::kF32, {T, N});
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu::linear(cuda_test::host_view(ref, {T, N}), cuda_test::host_view(x.f32, {T, K}),
              cuda_test::host_view(w.f32, {N, K}), TensorView());
  int ranks = 0;
  for (int rank = 0; rank < 32; ++rank) {
    d_out.fill_bytes(0xff);  // NaN poison
    std::string desc;
    if (!cuda_ops::linear_cublaslt_ranked(d_out.view(), d_x.view(), d_w.view(), rank, cuda_test::on(), &desc)) break;
    ++ranks;
    EXPECT_LE(cuda_test::nmse(d_out.download_f32(), ref), 1e-9) << "rank " << rank << " (" << desc << ")";
  }
  EXPECT_GE(ranks, 1);
}

TEST(CudaGemv, LinearDispatchesSmallBatches) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(25);
  for (int64_t T : {1, 2, 16}) {
    check_gemv(T, 1000, 1024, DType::kBF16, 0, rng, Path::kLinear);
    check_gemv(T, 384, 256, DType::kF32, 1, rng, Path::kLinear);
  }
}

TEST(CudaGemvBench, DISABLED_Shapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(7);
  const Shape3 shapes[] = {
      {"0.6B qkv", 4096, 1024, DType::kBF16},    {"0.6B o", 1024, 2048, DType::kBF16},
      {"0.6B gate_up", 6144, 1024, DType::kBF16}, {"0.6B down", 1024, 3072, DType::kBF16},
      {"0.6B lm_head", 151936, 1024, DType::kF32}, {"8B qkv", 6144, 4096, DType::kBF16},
      {"8B o", 4096, 4096, DType::kBF16},          {"8B gate_up", 24576, 4096, DType::kBF16},
      {"8B down", 4096, 12288, DType::kBF16},      {"8B lm_head", 151936, 4096, DType::kF32},
  };
  // Every candidate launch shape is timed; the columns are the best of each kind.
  std::printf("%-14s %3s | %8s %6s | %8s %8s %8s | %8s %6s | %s\n", "shape", "T", "best us", "TB/s", "rows", "strm-K",
              "bulk", "cublas", "TB/s", "speedup");
  for (const Shape3& sh : shapes) {
    const size_t wbytes = static_cast<size_t>(sh.N * sh.K * 2);
    const auto ws = weight_copies(sh, size_t{512} << 20, rng);
    const int copies = static_cast<int>(ws.size());
    for (int64_t T : {1, 4, 16}) {
      auto x = random_bf16(static_cast<size_t>(T * sh.K), rng);
      DeviceTensor d_x(DType::kBF16, {T, sh.K}, x.bits), d_out(sh.out, {T, sh.N});
      const int launches = std::max(copies, 20);
      auto run = [&](const cuda_ops::GemvConfig* cfg) {
        return graph_us_per_launch(launches, [&](int i, cudaStream_t s) {
          const TensorView wv = ws[static_cast<size_t>(i % copies)]->view();
          if (cfg != nullptr) cuda_ops::gemv(d_out.view(), d_x.view(), wv, TensorView(), cuda_test::on(s), cfg);
          else cuda_ops::linear_cublaslt(d_out.view(), d_x.view(), wv, TensorView(), cuda_test::on(s));
        });
      };
      double best[3] = {1e30, 1e30, 1e30};  // [row tiles, stream-K, bulk copies]
      for (const cuda_ops::GemvConfig& c : cuda_ops::gemv_candidates(T, sh.N, sh.K, cuda_test::context())) {
        double& b = best[c.bulk_units > 0 ? 2 : (c.stream_steps > 0 ? 1 : 0)];
        b = std::min(b, run(&c));
      }
      const double g = std::min({best[0], best[1], best[2]}), cb = run(nullptr);
      char bulk[16] = "       -";  // not a candidate for this shape
      if (best[2] < 1e30) std::snprintf(bulk, sizeof bulk, "%8.2f", best[2]);
      std::printf("%-14s %3lld | %8.2f %6.2f | %8.2f %8.2f %s | %8.2f %6.2f | %.2fx\n", sh.name,
                  static_cast<long long>(T), g, wbytes / (g * 1e6), best[0], best[1], bulk, cb, wbytes / (cb * 1e6),
                  cb / g);
      std::fflush(stdout);
    }
  }
}

// Decode-batch GEMMs (T = 32..256, the cuBLASLt path) of the Qwen3-0.6B layer: cuBLASLt's heuristic
// first choice against every other algorithm it offers, each as graph replays rotating over weight copies
// (L2-cold, as in a decode step; cuBLASLt kernels serialise there too).
TEST(CudaGemvBench, DISABLED_DecodeBatchCublasAlgos) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(8);
  const Shape3 shapes[] = {{"0.6B qkv", 4096, 1024, DType::kBF16}, {"0.6B o", 1024, 2048, DType::kBF16},
                           {"0.6B gate_up", 6144, 1024, DType::kBF16}, {"0.6B down", 1024, 3072, DType::kBF16}};
  std::printf("%-14s %3s | %8s | %8s %4s %s\n", "shape", "T", "rank0 us", "best us", "rank", "best algorithm");
  for (const Shape3& sh : shapes) {
    const auto ws = weight_copies(sh, size_t{256} << 20, rng);
    const int copies = static_cast<int>(ws.size());
    for (int64_t T : {32, 64, 128, 224, 256}) {
      auto x = random_bf16(static_cast<size_t>(T * sh.K), rng);
      DeviceTensor d_x(DType::kBF16, {T, sh.K}, x.bits), d_out(sh.out, {T, sh.N});
      double rank0 = 0, best = 1e30;
      int best_rank = -1;
      std::string best_desc;
      for (int rank = 0; rank < 32; ++rank) {
        std::string desc;
        if (!cuda_ops::linear_cublaslt_ranked(d_out.view(), d_x.view(), ws[0]->view(), rank, cuda_test::on(), &desc)) break;
        const double us = graph_us_per_launch(copies, [&](int i, cudaStream_t st) {
          cuda_ops::linear_cublaslt_ranked(d_out.view(), d_x.view(), ws[static_cast<size_t>(i)]->view(), rank,
                                           cuda_test::on(st));
        });
        if (rank == 0) rank0 = us;
        if (us < best) best = us, best_rank = rank, best_desc = desc;
      }
      std::printf("%-14s %3lld | %8.2f | %8.2f %4d %s\n", sh.name, static_cast<long long>(T), rank0, best, best_rank,
                  best_desc.c_str());
      std::fflush(stdout);
    }
  }
}

TEST(CudaElementwiseBench, DISABLED_PrologueAndNorms) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(8);
  // Prologue (Qwen3 0.6B / 8B heads, D = 128, q/k norms) and rms_norm / add_rms_norm: decode (T = 1, a
  // batch-224 decode step) and a prefill chunk (T = 8192); GB/s counts the bytes read and written once.
  for (auto [Hq, Hk, H] : {std::tuple<int64_t, int64_t, int64_t>{16, 8, 1024}, {32, 8, 4096}}) {
    for (int64_t T : {1, 224, 8192}) {
      const int64_t D = 128, BS = 16, NB = T / BS + 64, W = (Hq + 2 * Hk) * D;
      auto qkv = random_bf16(static_cast<size_t>(T * W), rng);
      auto nrm = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
      std::vector<float> inv_freq(static_cast<size_t>(D / 2));
      for (int64_t i = 0; i < D / 2; ++i)
        inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e6, -2.0 * static_cast<double>(i) / D));
      std::vector<int32_t> pos(static_cast<size_t>(T)), slot(static_cast<size_t>(NB * BS));
      std::iota(slot.begin(), slot.end(), 0);
      std::shuffle(slot.begin(), slot.end(), rng);
      slot.resize(static_cast<size_t>(T));
      for (auto& p : pos) p = static_cast<int32_t>(rng() % 4096);
      DeviceTensor d_qkv(DType::kBF16, {T, W}, qkv.bits), d_n(DType::kBF16, {D}, nrm.bits),
          d_if(DType::kF32, {D / 2}, inv_freq), d_pos(DType::kI32, {T}, pos), d_slot(DType::kI32, {T}, slot),
          d_q(DType::kBF16, {T, Hq, D}), d_kc(DType::kBF16, {NB, BS, Hk, D}), d_vc(DType::kBF16, {NB, BS, Hk, D});
      AttentionMetadata meta;
      meta.num_seqs = 1;
      meta.num_tokens = T;
      meta.slot_mapping = d_slot.view();
      meta.block_size = BS;
      const ops::RopeParams rope{d_if.view(), 1.0f};
      const double pro = graph_us_per_launch(50, [&](int, cudaStream_t s) {
        cuda_ops::qkv_prologue(d_q.view(), d_qkv.view(), d_n.view(), d_n.view(), 1e-6f, d_pos.view(), rope,
                               d_kc.view(), d_vc.view(), meta, cuda_test::on(s));
      });
      auto xs = random_bf16(static_cast<size_t>(T * H), rng), wn = random_bf16(static_cast<size_t>(H), rng, 0.5f, 1.5f);
      DeviceTensor d_xs(DType::kBF16, {T, H}, xs.bits), d_res(DType::kBF16, {T, H}, xs.bits),
          d_wn(DType::kBF16, {H}, wn.bits), d_o(DType::kBF16, {T, H});
      const double rn = graph_us_per_launch(50, [&](int, cudaStream_t s) {
        cuda_ops::rms_norm(d_o.view(), d_xs.view(), d_wn.view(), 1e-6f, cuda_test::on(s));
      });
      const double arn = graph_us_per_launch(50, [&](int, cudaStream_t s) {
        cuda_ops::add_rms_norm(d_xs.view(), d_res.view(), d_wn.view(), 1e-6f, cuda_test::on(s));
      });
      const double pro_gb = static_cast<double>(T * W * 2 * 2) / (pro * 1e3);  // qkv in, q + k/v out
      const double rn_gb = static_cast<double>(T * H * 2 * 2) / (rn * 1e3);
      const double arn_gb = static_cast<double>(T * H * 2 * 4) / (arn * 1e3);
      std::printf("T=%-5lld Hq=%lld Hk=%lld H=%lld: qkv_prologue %8.2f us (%6.0f GB/s), rms_norm %7.2f us (%6.0f GB/s), "
                  "add_rms_norm %7.2f us (%6.0f GB/s)\n",
                  static_cast<long long>(T), static_cast<long long>(Hq), static_cast<long long>(Hk),
                  static_cast<long long>(H), pro, pro_gb, rn, rn_gb, arn, arn_gb);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace nanovllm
