// out[T, N] = in[T, K] @ W[N, K]^T (+ bias[N]). Small bf16 batches (T <= kGemvMaxTokens) go to gemv.cu
// when that timed faster; the rest through cuBLASLt, fp32 accumulation (CUBLAS_COMPUTE_32F).
// Column-major view: D^T[N, T] = op_T(W as col-major [K, N], ld K) * (in as col-major [K, T], ld K),
// ld of D = N. in and W share a dtype (BF16 / F16 / F32); out is that dtype or F32 (fp32 logits).
// Bias: cuBLASLt epilogue BIAS when bias dtype == out dtype (added in fp32 before the output rounding);
// otherwise (or when no algorithm supports the epilogue) a separate broadcast-add kernel.
// Per device context: one handle and a 32 MiB workspace (allocated at first use: run one warm-up step
// before capturing CUDA graphs). The algorithm is chosen once per (T, N, K, dtypes, epilogue, alignments)
// with cublasLtMatmulAlgoGetHeuristic and cached. One stream at a time uses a context's workspace.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cublaslt_shared.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/event_timing.h"
#include "nanovllm/kernels/cuda/gemv.cuh"
#include "nanovllm/kernels/cuda/linear_tuning.h"

namespace nanovllm::cuda_ops {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct AlgoKey {
  int64_t t, n, k;
  int in_dt, out_dt, bias_dt;  // bias_dt -1: no epilogue
  int align_a, align_b, align_c;
  bool operator==(const AlgoKey& o) const { return std::memcmp(this, &o, sizeof(AlgoKey)) == 0; }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    size_t h = 1469598103934665603ull;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&k);
    for (size_t i = 0; i < sizeof(AlgoKey); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};
struct AlgoEntry {
  bool ok = false;  // false: no algorithm for this configuration
  cublasLtMatmulAlgo_t algo;
};

// A device context's cuBLASLt state (DeviceContext::op_state).
struct LtState {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // [kWorkspaceBytes]
  std::unordered_map<AlgoKey, AlgoEntry, AlgoKeyHash> algos;
  LtState() {
    CUBLAS_CHECK(cublasLtCreate(&handle));
    CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  }
  ~LtState() {
    cudaFree(workspace);
    cublasLtDestroy(handle);
  }
  LtState(const LtState&) = delete;
  LtState& operator=(const LtState&) = delete;
};

LtState& lt_state(ops::Stream s) {
  return context_of(s).op_state<LtState>([] { return std::make_unique<LtState>(); });
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF32: return CUDA_R_32F;
    default: NANOVLLM_FAIL("linear: unsupported dtype ", dtype_name(t));
  }
}

struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~Descs() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The matmul's descriptors: D^T[N, T] = W^T-op * in, fp32 compute, optional BIAS epilogue.
void make_descs(Descs& d, DType in_t, DType out_t, const void* bias, int64_t T, int64_t N, int64_t K) {
  const cudaDataType_t ab = cuda_type(in_t), cd = cuda_type(out_t);
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const cudaDataType_t bt = cd;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab, static_cast<uint64_t>(K), static_cast<uint64_t>(T), K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, cd, static_cast<uint64_t>(N), static_cast<uint64_t>(T), N));
}

// Heuristic preference: the workspace bound and the operands' actual alignments.
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  Pref(uint32_t al_a, uint32_t al_b, uint32_t al_c) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    const uint64_t ws = kWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
  }
  ~Pref() { cublasLtMatmulPreferenceDestroy(p); }
  Pref(const Pref&) = delete;
  Pref& operator=(const Pref&) = delete;
};

// Returns false if cuBLASLt has no algorithm for this configuration (only possible with the epilogue).
bool run_matmul(LtState& ctx, void* out, DType out_t, const void* in, const void* w, DType in_t,
                const void* bias, int64_t T, int64_t N, int64_t K, cudaStream_t st) {
  Descs d;
  make_descs(d, in_t, out_t, bias, T, N, K);
  const AlgoKey key{T,
                    N,
                    K,
                    static_cast<int>(in_t),
                    static_cast<int>(out_t),
                    bias ? static_cast<int>(out_t) : -1,
                    pointer_alignment(w),
                    pointer_alignment(in),
                    pointer_alignment(out)};
  AlgoEntry entry;
  if (auto it = ctx.algos.find(key); it != ctx.algos.end()) {
    entry = it->second;
  } else {
    const Pref pref(static_cast<uint32_t>(key.align_a), static_cast<uint32_t>(key.align_b),
                    static_cast<uint32_t>(key.align_c));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t stt =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle, d.op, d.a, d.b, d.c, d.c, pref.p, 1, &res, &found);
    entry.ok = stt == CUBLAS_STATUS_SUCCESS && found > 0;
    if (entry.ok) entry.algo = res.algo;
    ctx.algos.emplace(key, entry);
  }
  if (!entry.ok) {
    NANOVLLM_CHECK(bias != nullptr, "linear: cuBLASLt found no algorithm for T=", T, " N=", N, " K=", K,
                   " in ", dtype_name(in_t), " out ", dtype_name(out_t));
    return false;
  }
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx.handle, d.op, &alpha, w, d.a, in, d.b, &beta, out, d.c, out, d.c, &entry.algo,
                              ctx.workspace, kWorkspaceBytes, st));
  return true;
}

__global__ void add_bias_kernel(void* out, int out_dt, const void* bias, int bias_dt, int64_t N, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    store_f32(out, out_dt, i, load_f32(out, out_dt, i) + load_f32(bias, bias_dt, i % N));
}

}  // namespace

CublasLtShared cublaslt_shared(ops::Stream s) {
  LtState& st = lt_state(s);
  return {st.handle, st.workspace, kWorkspaceBytes};
}

bool linear_cublaslt_ranked(TensorView out, TensorView in, TensorView weight, int rank, ops::Stream s,
                            std::string* desc) {
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  LtState& ctx = lt_state(s);
  Descs d;
  make_descs(d, in.dtype(), out.dtype(), nullptr, T, N, K);
  const Pref pref(static_cast<uint32_t>(pointer_alignment(weight.data())),
                  static_cast<uint32_t>(pointer_alignment(in.data())),
                  static_cast<uint32_t>(pointer_alignment(out.data())));
  constexpr int kMaxRanks = 32;
  cublasLtMatmulHeuristicResult_t res[kMaxRanks] = {};
  int found = 0;
  if (rank < 0 || rank >= kMaxRanks ||
      cublasLtMatmulAlgoGetHeuristic(ctx.handle, d.op, d.a, d.b, d.c, d.c, pref.p, kMaxRanks, res, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      rank >= found)
    return false;
  if (desc != nullptr) {
    int tile = 0, splitk = 0, stages = 0, red = 0;
    size_t n = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&res[rank].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &n);
    cublasLtMatmulAlgoConfigGetAttribute(&res[rank].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &n);
    cublasLtMatmulAlgoConfigGetAttribute(&res[rank].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &n);
    cublasLtMatmulAlgoConfigGetAttribute(&res[rank].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &n);
    *desc = "tile " + std::to_string(tile) + " splitK " + std::to_string(splitk) + " red " + std::to_string(red) +
            " stages " + std::to_string(stages) + " ws " + std::to_string(res[rank].workspaceSize >> 10) + "K";
  }
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(ctx.handle, d.op, &alpha, weight.data(), d.a, in.data(), d.b, &beta, out.data(), d.c,
                              out.data(), d.c, &res[rank].algo, ctx.workspace, kWorkspaceBytes, stream_of(s)));
  return true;
}

void linear_cublaslt(TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s) {
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  if (T == 0 || N == 0) return;
  NANOVLLM_CHECK(in.dtype() == weight.dtype(), "linear (cuda): input ", dtype_name(in.dtype()),
                 " and weight ", dtype_name(weight.dtype()), " must share a dtype");
  NANOVLLM_CHECK(out.dtype() == in.dtype() || out.dtype() == DType::kF32, "linear (cuda): output ",
                 dtype_name(out.dtype()), " must be F32 or the input dtype");
  const cudaStream_t st = stream_of(s);
  LtState& ctx = lt_state(s);
  const bool has_bias = bias.defined() && bias.numel() > 0 && bias.data() != nullptr;
  const bool epilogue = has_bias && bias.dtype() == out.dtype();
  if (run_matmul(ctx, out.data(), out.dtype(), in.data(), weight.data(), in.dtype(),
                 epilogue ? bias.data() : nullptr, T, N, K, st)) {
    if (!has_bias || epilogue) return;
  } else {
    run_matmul(ctx, out.data(), out.dtype(), in.data(), weight.data(), in.dtype(), nullptr, T, N, K, st);
  }
  const int64_t total = T * N;
  const int64_t blocks = (total + 255) / 256;
  add_bias_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, st>>>(
      out.data(), dt(out), bias.data(), dt(bias), N, total);
  CUDA_CHECK_LAUNCH();
}

// Decode-sized bf16 batches: gemv (weight streaming) or cuBLASLt, whichever ran faster for this shape on
// its first use (measured on H200: gemv wins 1.3-2.5x on the 0.6B o/down projections, cuBLASLt wins on
// some 8B ones). gemv's launch shapes (gemv_candidates) are timed too and the fastest is kept. The first
// use is the runner's eager warm-up, never a graph capture; a shape first seen while the stream is
// capturing takes gemv's default shape without timing.
namespace {

// One timed candidate: the choice it stands for and how to run it on a stream.
struct Candidate {
  LinearChoice choice;
  std::function<void(ops::Stream)> run;
  bool preferred = false;  // the choice whatever the timing (the in-graph tuner may still replace it)
};

// Every candidate from `candidates()` and `run_other(stream)` compute the same op; returns the fastest
// (timed once per shape and context). Weights under kGraphTimingMaxBytes (kernels of a few us, shorter than
// the host's launch interval) are timed as the decode graphs run them: 10 back-to-back calls in one CUDA
// graph, the best of 3 replays. Eager launches measured the host's launch gaps there: the choice moved a
// 0.6B decode layer by up to 2.8 us from one process to the next (H200, bs=1, 3 processes each:
// 1.055-1.101 ms/token eager, 1.042-1.054 in graphs). Larger weights keep eager timing (5 calls): in
// graphs the Qwen3-8B picks were no better (4.663-4.770 vs 4.664-4.690 ms/token). Timed on a stream of its
// own, after `s` has finished: the legacy default stream cannot be captured. First seen while capturing:
// gemv's default shape (`gemv_fallback`) or the other option, untimed.
constexpr int64_t kGraphTimingMaxBytes = int64_t{16} << 20;

template <typename C, typename O>
LinearChoice choose(const LinearShape& key, bool gemv_fallback, ops::Stream s, C&& candidates, O&& run_other) {
  DeviceContext& ctx = context_of(s);
  if (const std::optional<LinearChoice> c = ctx.linear_choices.find(key)) return *c;
  const cudaStream_t st = stream_of(s);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(st, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) {
    LinearChoice c;
    c.gemv = gemv_fallback;
    return c;
  }
  CUDA_CHECK(cudaStreamSynchronize(st));  // the op's inputs are ready
  cudaStream_t ts = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking));
  const ops::Stream timing{ts, &ctx};
  const bool in_graph = key.n * key.k * 2 < kGraphTimingMaxBytes;
  auto time_us = [&](auto&& fn) {
    return static_cast<float>((in_graph ? graph_min_ms(ts, 10, 3, fn) : average_ms(ts, 5, fn)) * 1e3);
  };
  std::vector<std::pair<float, LinearChoice>> timed;  // (us, option); the first: run_other
  LinearChoice other;
  other.gemv = false;
  timed.emplace_back(time_us([&] { run_other(timing); }), other);
  const float other_us = timed[0].first;
  int preferred = -1;
  for (const Candidate& c : candidates()) {
    if (c.preferred && preferred < 0) preferred = static_cast<int>(timed.size());
    timed.emplace_back(time_us([&] { c.run(timing); }), c.choice);
  }
  CUDA_CHECK(cudaStreamSynchronize(ts));
  CUDA_CHECK(cudaStreamDestroy(ts));
  // Fastest alone first, but a preferred candidate first of all.
  if (preferred > 0) std::rotate(timed.begin(), timed.begin() + preferred, timed.begin() + preferred + 1);
  std::stable_sort(timed.begin() + (preferred > 0 ? 1 : 0), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LinearChoice> options;
  std::vector<float> alone_us;
  for (auto& [us, c] : timed) {
    c.timed = true;
    options.push_back(c);
    alone_us.push_back(us);
  }
  NANOVLLM_DEBUG("linear T=", key.t, " N=", key.n, " K=", key.k, linear_fusion_tag(key.fusion), ": ",
                 describe(options[0], key.fusion), " ", alone_us[0], " us; ", linear_other_option(key.fusion), " ",
                 other_us, " us");
  return ctx.linear_choices.record(key, std::move(options), std::move(alone_us));
}

// The choice a candidate launch shape stands for.
LinearChoice choice_of(const GemvConfig& cfg) {
  LinearChoice c;
  c.cfg = cfg;
  return c;
}

}  // namespace

void linear(TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s, ops::LinearHint hint) {
  if (in.dim(0) == 0 || weight.dim(0) == 0) return;
  if (gemv_supported(out, in, weight)) {
    const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
    const bool has_bias = bias.defined() && bias.data() != nullptr;
    const bool before_attention = hint == ops::LinearHint::kBeforeAttention;
    const LinearShape key{T, N, K, static_cast<int>(out.dtype()), has_bias, LinearFusion::kNone, before_attention};
    DeviceContext& ctx = context_of(s);
    auto candidates = [&] {
      std::vector<Candidate> cs;
      auto add = [&](const GemvConfig& g, bool preferred) {
        cs.push_back({choice_of(g), [&, g](ops::Stream ts) { gemv(out, in, weight, bias, ts, &g); }, preferred});
      };
      // Before the attention: the one-CTA-per-SM shape is preferred (gemv.cu says why); the other shapes
      // are offered to the in-graph tuner (linear_tuning.h), which may find one faster there.
      GemvConfig first;  // bulk_units == 0: none preferred
      if (before_attention)
        if (const auto one = gemv_candidates(T, N, K, ctx, false, true); one.size() == 1) {
          first = one[0];
          add(first, true);
        }
      for (const GemvConfig& g : gemv_candidates(T, N, K, ctx, false, false))
        if (!(first.bulk_units > 0 && g == first)) add(g, false);
      return cs;
    };
    const LinearChoice c = choose(key, true, s, candidates,
                                  [&](ops::Stream ts) { linear_cublaslt(out, in, weight, bias, ts); });
    if (c.gemv) return gemv(out, in, weight, bias, s, c.timed ? &c.cfg : nullptr);
  }
  linear_cublaslt(out, in, weight, bias, s);
}

void linear_silu_mul(TensorView out, TensorView gate_up, TensorView weight, TensorView act, ops::Stream s) {
  if (gate_up.dim(0) == 0 || weight.dim(0) == 0) return;
  if (gemv_silu_supported(out, gate_up, weight)) {
    const LinearShape key{gate_up.dim(0), weight.dim(0), weight.dim(1), static_cast<int>(out.dtype()), false,
                          LinearFusion::kSiluMulIn, false};
    const LinearChoice c = choose(
        key, true, s,
        [&] {
          std::vector<Candidate> cs;
          for (const GemvConfig& g : gemv_candidates(key.t, key.n, key.k, context_of(s), true))
            cs.push_back({choice_of(g), [&, g](ops::Stream ts) { gemv_silu(out, gate_up, weight, ts, &g); }});
          return cs;
        },
        [&](ops::Stream ts) {
          // The unfused pair, its linear itself gemv or cuBLASLt: measured faster than gemv_silu on the
          // 0.6B decode layer (H200, PDL on: 33.9 vs 36.2 us/layer), so the choice must include it.
          cuda_ops::silu_mul(act, gate_up, ts);
          cuda_ops::linear(out, act, weight, TensorView(), ts);
        });
    if (c.gemv) return gemv_silu(out, gate_up, weight, s, c.timed ? &c.cfg : nullptr);
  }
  cuda_ops::silu_mul(act, gate_up, s);
  cuda_ops::linear(out, act, weight, TensorView(), s);
}

namespace {

// silu_mul goes into the gate_up projection's epilogue only for weights of at least this many bytes. Measured on an
// H100 at bs=1: Qwen3-8B (gate_up 201 MB) 5.841-5.845 -> 5.652-5.653 ms/token, Qwen3-4B (100 MB) 3.636 -> 3.565
// (docs/experiments.md, "fused gate_up + silu offered for the 0.6B gate_up"). Offered for the Qwen3-0.6B gate_up
// (12.6 MB) too, the fused register-fed kernel won alone against the bulk-copy gemv + silu_mul, and the step got 3%
// slower (0.923 vs 0.896 ms/token): the early norm trigger, decided before the linear tuning, was then turned off.
constexpr int64_t kGateUpSiluMinBytes = int64_t{16} << 20;

// act = silu_mul(x @ W^T) by gemv_gate_up_silu when the dispatch timed it faster than the projection and
// silu_mul apart (true: act is written); false: the caller runs the unfused projection.
bool gate_up_silu_fused(TensorView act, TensorView x, TensorView weight, TensorView gate_up, ops::Stream s) {
  if (!gemv_gate_up_silu_supported(act, x, weight) || weight.numel() * 2 < kGateUpSiluMinBytes) return false;
  const LinearShape key{x.dim(0), weight.dim(0), weight.dim(1), static_cast<int>(act.dtype()), false,
                        LinearFusion::kSiluMulOut, false};
  const LinearChoice c = choose(
      key, false, s,
      [&] {
        std::vector<Candidate> cs;
        for (const GemvConfig& g : gemv_gate_up_silu_candidates(key.n))
          cs.push_back({choice_of(g), [&, g](ops::Stream ts) { gemv_gate_up_silu(act, x, weight, ts, &g); }});
        return cs;
      },
      [&](ops::Stream ts) {
        cuda_ops::linear(gate_up, x, weight, TensorView(), ts);
        cuda_ops::silu_mul(act, gate_up, ts);
      });
  if (!c.gemv) return false;
  gemv_gate_up_silu(act, x, weight, s, c.timed ? &c.cfg : nullptr);
  return true;
}

}  // namespace

void silu_mlp(TensorView out, TensorView x, TensorView gate_up_w, TensorView down_w, TensorView gate_up,
              TensorView act, ops::Stream s) {
  if (x.dim(0) == 0) return;
  if (gate_up_silu_fused(act, x, gate_up_w, gate_up, s)) return cuda_ops::linear(out, act, down_w, TensorView(), s);
  cuda_ops::linear(gate_up, x, gate_up_w, TensorView(), s);
  cuda_ops::linear_silu_mul(out, gate_up, down_w, act, s);
}

}  // namespace nanovllm::cuda_ops
