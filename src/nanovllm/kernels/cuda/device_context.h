// The per-device state of the CUDA ops, owned by a runner and passed with its stream (ops::Stream), in the
// spirit of llama.cpp's ggml_backend_cuda_context: the device's properties, the kernel options the runner
// sets, the linear dispatch's kernel choices (timed per shape at first use, then tuned inside the decode
// graphs: linear_tuning.h) and what each op keeps per device (workspaces, the cuBLASLt handle, caches),
// created at the op's first use. Nothing of it is process-global: two runners never share workspaces or
// choices. One stream at a time runs a context's ops (the runner's compute stream; the offload pipeline
// computes on it too), since the workspaces are reused by every launch. Host C++ only (no device code).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <typeindex>
#include <unordered_map>

#include "nanovllm/kernels/cuda/linear_tuning.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// The GEMM of the fp8 projections past kFp8GemvMaxTokens rows (fp8_linear.h): cuBLASLt's block-scaled fp8 matmul,
// or the mma.sync kernel (which also runs what cuBLASLt cannot).
enum class Fp8Gemm { kCublasLt, kMmaSync };

// Kernel switches. The defaults are the measured winners; the alternatives compute the same values and
// stay because another device needs them (no clusters below sm_90, no wgmma off sm_90a) or for debugging.
struct KernelOptions {
  // Decode-path kernels carry the PDL attribute (sm_90+; pdl.cuh). Default: NANOVLLM_PDL (on).
  bool pdl = true;
  // RMSNorm kernels launch their dependents before their own wait (pdl.cuh). The CUDA runner times both per
  // decode graph bucket (DecodeGraphs); this is the setting outside the graphs: off, unless
  // NANOVLLM_PDL_EARLY_NORM=1. Off won on the eager offloaded decode step (H200, 4B YaRN, one 128K request, fp8 KV,
  // Quest 2048: 8.08-8.11 vs 9.21-9.37 ms/token, same call; docs/experiments.md).
  bool pdl_early_norm = false;
  // qkv_prologue_attention runs the prologue inside the decode attention kernel (sm_90, head_dim 64 / 128).
  bool decode_fused_prologue = true;
  // The decode attention combines its splits through a thread-block cluster (sm_90) rather than through
  // global memory and arrival counters.
  bool decode_cluster_combine = true;
  // Prefill attention through the wgmma kernel where the device runs sm_90a code (else mma.sync).
  bool prefill_wgmma = true;
  // The MoE experts' tiled GEMM (steps past kMoeGemvMaxTokens) through the wgmma kernel where the device runs sm_90a
  // code (else mma.sync): H200, 30B-A3B shape, T = 8192: 426 vs 242 TFLOP/s (moe_gemm_wgmma.cu).
  bool moe_gemm_wgmma = true;
  // The fp8 GEMM past kFp8MmaGemvMaxTokens rows: cuBLASLt's block-scaled matmul won its A/B (H200, 8B prefill 8K: 47,245 vs 14,909
  // tok/s); tests pick the mma.sync kernel, which also runs whatever cuBLASLt cannot (docs/fp8.md).
  Fp8Gemm fp8_gemm = Fp8Gemm::kCublasLt;
};

class DeviceContext {
 public:
  // Reads the device's properties; the options start from the environment (core/env.h). Allocates nothing:
  // the ops create their state at first use (run an eager warm-up step before capturing graphs).
  explicit DeviceContext(int device);
  ~DeviceContext();  // frees the ops' state: nothing launched through this context may still run
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  int compute_major() const { return major_; }
  // Shared memory a block may opt into (cudaFuncAttributeMaxDynamicSharedMemorySize's ceiling), bytes.
  int smem_optin() const { return smem_optin_; }
  // Launches carry the PDL attribute: requested and supported (sm_90+).
  bool use_pdl() const { return options.pdl && major_ >= 9; }

  KernelOptions options;
  LinearChoices linear_choices;  // the linear dispatch's timed choices (linear.cu, linear_tuning.h)

  // The per-device state an op's implementation keeps (State is a type of that op's .cu file), made by
  // `make()` (a std::unique_ptr<State>) at the first call and destroyed with the context.
  template <typename State, typename Make>
  State& op_state(Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(std::type_index(typeid(State)));
    if (it == states_.end()) {
      std::unique_ptr<State> s = make();
      it = states_.emplace(std::type_index(typeid(State)), Erased(s.release(), [](void* p) { delete static_cast<State*>(p); }))
               .first;
    }
    return *static_cast<State*>(it->second.get());
  }

 private:
  using Erased = std::unique_ptr<void, void (*)(void*)>;
  int device_ = 0;
  int sm_count_ = 0;
  int major_ = 0;
  int smem_optin_ = 0;
  std::mutex mu_;
  std::unordered_map<std::type_index, Erased> states_;
};

// The context of a CUDA op's stream; a clear error when the caller passed none.
DeviceContext& context_of(ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
