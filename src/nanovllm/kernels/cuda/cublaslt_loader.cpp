// cuBLASLt, opened at its first call instead of linked. Loading libcublasLt.so (541 MB in CUDA 13) cost every process
// linked to it ~0.5 s of CPU before main, with or without a GPU: every test process (ctest starts one per test), every
// CLI run a test starts, every `import nanovllm` of a CUDA build. The functions linear.cu calls are defined here with
// cublasLt.h's declarations and forward to the library's, looked up once; a machine without the library gets an error
// naming it at the first GEMM.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "nanovllm/core/error.h"

namespace {

const std::string& soname() {
  static const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  return name;
}

void* library() {
  static void* const handle = [] {
    void* h = ::dlopen(soname().c_str(), RTLD_NOW | RTLD_LOCAL);
    NANOVLLM_CHECK(h != nullptr, "the CUDA backend needs cuBLASLt: ", ::dlerror());
    return h;
  }();
  return handle;
}

// The library's function `name`, of the type of our definition F.
template <class F>
F* symbol(F*, const char* name) {
  void* f = ::dlsym(library(), name);
  NANOVLLM_CHECK(f != nullptr, soname(), " has no ", name);
  return reinterpret_cast<F*>(f);
}

}  // namespace

// Each definition looks its function up on its first call (a function-local static: once, thread-safe).
#define NANOVLLM_CUBLASLT(name, params, args)                   \
  cublasStatus_t CUBLASWINAPI name params {                     \
    static auto* const real = symbol(&name, #name);             \
    return real args;                                           \
  }

extern "C" {
NANOVLLM_CUBLASLT(cublasLtCreate, (cublasLtHandle_t* lightHandle), (lightHandle))
NANOVLLM_CUBLASLT(cublasLtDestroy, (cublasLtHandle_t lightHandle), (lightHandle))
NANOVLLM_CUBLASLT(cublasLtMatmul,
                  (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,
                   cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                   const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                   const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                   cudaStream_t stream),
                  (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                   workspaceSizeInBytes, stream))
NANOVLLM_CUBLASLT(cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType),
                  (matmulDesc, computeType, scaleType))
NANOVLLM_CUBLASLT(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))
NANOVLLM_CUBLASLT(cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                   size_t sizeInBytes),
                  (matmulDesc, attr, buf, sizeInBytes))
NANOVLLM_CUBLASLT(cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                  (matLayout, type, rows, cols, ld))
NANOVLLM_CUBLASLT(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout))
NANOVLLM_CUBLASLT(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t* pref), (pref))
NANOVLLM_CUBLASLT(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
NANOVLLM_CUBLASLT(cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                   size_t sizeInBytes),
                  (pref, attr, buf, sizeInBytes))
NANOVLLM_CUBLASLT(cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
                   cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                   cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                   cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount),
                  (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
                   heuristicResultsArray, returnAlgoCount))
NANOVLLM_CUBLASLT(cublasLtMatmulAlgoConfigGetAttribute,
                  (const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                   size_t sizeInBytes, size_t* sizeWritten),
                  (algo, attr, buf, sizeInBytes, sizeWritten))
}
