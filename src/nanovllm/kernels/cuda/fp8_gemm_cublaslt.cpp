// The fp8 GEMM of prefill and larger batches through cuBLASLt (fp8_linear.h): Hopper's block-scaled fp8 matmul
// (cuBLAS 12.9+), the same sum as fp8_gemm.cu's kernel: out[m, n] = sum over 128-column blocks b of
// (A codes . W codes over b) * a_scale[m, b] * w_scale[n / 128, b].
// Column-major view, as linear.cu's: D^T [N, M] = op_T(W as col-major [K, N], ld K) * (codes as col-major [K, M],
// ld K), ld of D = N: fp8 needs this "TN" form. So cuBLASLt's matrix A is the weight and B the activations:
//   * A scales, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: one f32 per 128 x 128 block, the K blocks of a
//     weight-row block contiguous: weight_scale [N / 128, K / 128] row-major as loaded, read with a row stride of
//     K / 128 rounded up to 4 (the layout PyTorch's scaled_mm hands cuBLASLt pads its rows so); equal to ours
//     when K / 128 is a multiple of 4, the only case sent here.
//   * B scales, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: one f32 per row and 128 columns, rows fastest ("outer-dim
//     major", as PyTorch's scaled_mm requires of 1 x 128 scales): [K / 128, M], which fp8_quantize_activations
//     writes directly with Fp8ScaleLayout::kKBlockMajor.
// fp32 compute without fast accumulation (cuBLASLt promotes the tensor cores' partial sums), bf16 or f32 out.
// The algorithm is asked once per (M, N, K, out dtype, alignments) and cached in the device context; the handle
// and workspace are linear.cu's (cublaslt_shared.h). A matmul captured into a CUDA graph keeps its pointers: the
// activation codes and scales live in fp8_linear.cu's fixed workspace.
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/cuda/cublaslt_shared.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/fp8_linear.h"

namespace nanovllm::cuda_ops {
namespace {

constexpr int64_t kBlock = 128;

struct AlgoKey {
  int64_t m, n, k;
  int out_dt;
  int align_out, align_codes, align_weight;
  bool operator==(const AlgoKey& o) const {
    return m == o.m && n == o.n && k == o.k && out_dt == o.out_dt && align_out == o.align_out &&
           align_codes == o.align_codes && align_weight == o.align_weight;
  }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : {k.m, k.n, k.k, int64_t{k.out_dt}, int64_t{k.align_out}, int64_t{k.align_codes},
                      int64_t{k.align_weight}})
      h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};
struct AlgoEntry {
  bool ok = false;  // false: cuBLASLt offered none (or refused the descriptor)
  cublasLtMatmulAlgo_t algo{};
};
// A device context's cached choices (DeviceContext::op_state).
struct Fp8LtAlgos {
  std::unordered_map<AlgoKey, AlgoEntry, AlgoKeyHash> algos;
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The matmul's descriptors; `ok` false when cuBLASLt refused an attribute (a library without the block-scaled
// modes): the caller treats it as no algorithm.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  bool ok = false;
  Descs(int64_t M, int64_t N, int64_t K, DType out_t, const void* a_scale, const void* b_scale) {
    const auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t bytes) {
      return cublasLtMatmulDescSetAttribute(op, attr, v, bytes) == CUBLAS_STATUS_SUCCESS;
    };
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const cudaDataType_t dt = out_t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
         set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) && set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) &&
         set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode) &&
         set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode) &&
         set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale) &&
         set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale) &&
         cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, static_cast<uint64_t>(K), static_cast<uint64_t>(N), K) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, static_cast<uint64_t>(K), static_cast<uint64_t>(M), K) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d, dt, static_cast<uint64_t>(N), static_cast<uint64_t>(M), N) ==
             CUBLAS_STATUS_SUCCESS;
  }
  ~Descs() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

// cuBLASLt's best algorithm for these descriptors within the shared workspace and the key's alignments.
AlgoEntry ask_heuristic(const CublasLtShared& lt, const Descs& d, const AlgoKey& key) {
  AlgoEntry e;
  if (!d.ok) return e;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return e;
  const uint64_t ws = lt.workspace_bytes;
  const uint32_t al_a = static_cast<uint32_t>(key.align_weight), al_b = static_cast<uint32_t>(key.align_codes),
                 al_d = static_cast<uint32_t>(key.align_out);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const bool ok =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(lt.handle, d.op, d.a, d.b, d.d, d.d, pref, 1, &res, &found) ==
          CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreferenceDestroy(pref);
  e.ok = ok && found > 0;
  if (e.ok) e.algo = res.algo;
  return e;
}

// The shapes cuBLASLt's block-scaled modes take with our scale layouts (fp8_linear.h), before asking it.
bool shape_fits(TensorView out, TensorView codes, TensorView scales, TensorView weight, TensorView weight_scale) {
  const int64_t M = codes.dim(0), K = codes.dim(1), N = weight.dim(0);
  return (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32) && codes.dtype() == DType::kF8E4M3 &&
         weight.dtype() == DType::kF8E4M3 && weight.dim(1) == K && out.dim(0) == M && out.dim(1) == N &&
         N % kBlock == 0 && K % kBlock == 0 && (K / kBlock) % 4 == 0 &&
         scales.shape() == Shape{K / kBlock, M} && scales.dtype() == DType::kF32 &&
         weight_scale.shape() == Shape{N / kBlock, K / kBlock} && weight_scale.dtype() == DType::kF32 &&
         aligned16(out.data()) && aligned16(codes.data()) && aligned16(weight.data()) && aligned16(scales.data()) &&
         aligned16(weight_scale.data());
}

// The cached entry of these operands (asked now when new); nullptr when they do not fit at all.
const AlgoEntry* entry_for(TensorView out, TensorView codes, TensorView scales, TensorView weight,
                           TensorView weight_scale, ops::Stream s) {
  DeviceContext& ctx = context_of(s);
  if (ctx.compute_major() != 9 || !shape_fits(out, codes, scales, weight, weight_scale)) return nullptr;
  const int64_t M = codes.dim(0), K = codes.dim(1), N = weight.dim(0);
  const AlgoKey key{M, N, K, static_cast<int>(out.dtype()), pointer_alignment(out.data()),
                    pointer_alignment(codes.data()), pointer_alignment(weight.data())};
  Fp8LtAlgos& cache = ctx.op_state<Fp8LtAlgos>([] { return std::make_unique<Fp8LtAlgos>(); });
  if (auto it = cache.algos.find(key); it != cache.algos.end()) return &it->second;
  const Descs d(M, N, K, out.dtype(), weight_scale.data(), scales.data());
  const AlgoEntry e = ask_heuristic(cublaslt_shared(s), d, key);
  if (!e.ok)
    NANOVLLM_WARN("fp8 GEMM: cuBLASLt has no block-scaled fp8 algorithm for M=", M, " N=", N, " K=", K, " out ",
                  dtype_name(out.dtype()), d.ok ? "" : " (it refused the block-scaled descriptor)",
                  "; this shape runs the mma.sync kernel");
  return &cache.algos.emplace(key, e).first->second;
}

}  // namespace

bool fp8_gemm_cublaslt_supported(TensorView out, TensorView codes, TensorView scales, TensorView weight,
                                 TensorView weight_scale, ops::Stream s) {
  const AlgoEntry* e = entry_for(out, codes, scales, weight, weight_scale, s);
  return e != nullptr && e->ok;
}

void fp8_gemm_cublaslt(TensorView out, TensorView codes, TensorView scales, TensorView weight, TensorView weight_scale,
                       ops::Stream s) {
  if (codes.dim(0) == 0) return;
  const AlgoEntry* e = entry_for(out, codes, scales, weight, weight_scale, s);
  NANOVLLM_CHECK(e != nullptr && e->ok, "fp8_gemm_cublaslt: cuBLASLt cannot run out ", out.shape().str(), " ",
                 dtype_name(out.dtype()), " = codes ", codes.shape().str(), " x weight ", weight.shape().str(),
                 "^T with scales ", scales.shape().str(), " / ", weight_scale.shape().str(),
                 " (check fp8_gemm_cublaslt_supported first)");
  const int64_t M = codes.dim(0), K = codes.dim(1), N = weight.dim(0);
  const Descs d(M, N, K, out.dtype(), weight_scale.data(), scales.data());
  NANOVLLM_CHECK(d.ok, "fp8_gemm_cublaslt: cuBLASLt refused the descriptor it accepted before");
  const CublasLtShared lt = cublaslt_shared(s);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt.handle, d.op, &alpha, weight.data(), d.a, codes.data(), d.b, &beta, out.data(), d.d,
                              out.data(), d.d, &e->algo, lt.workspace, lt.workspace_bytes,
                              static_cast<cudaStream_t>(s.cuda_stream)));
}

}  // namespace nanovllm::cuda_ops
