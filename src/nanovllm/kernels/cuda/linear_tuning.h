// In-context tuning of cuda_ops::linear's kernel choices. The dispatch (linear.cu) picks a kernel for
// each decode-sized shape by timing every option alone. Inside a decode graph the projections overlap
// their neighbours through PDL and stream L2-cold weights, so the fastest alone is not always the
// fastest there: on an H100 with the Qwen3-8B shapes gemv_rows streamed gate_up 5% faster alone and
// made the bs=1 step 4.6% slower (bench/results session 16). CudaModelRunner therefore times whole
// decode graphs with each option of a shape (capture_tuned_decode) and keeps the fastest.
// Plain C++ declarations (no device code); not thread-safe against concurrent linear() calls that
// time new shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

// The activation an op fuses around its projection, and so what its non-gemv option is:
//  kNone: a plain linear (cuBLASLt);
//  kSiluMulIn: linear_silu_mul, silu_mul of the input (gemv_silu vs silu_mul + linear);
//  kSiluMulOut: silu_mlp's gate_up side, silu_mul of the output (gemv_gate_up_silu vs linear + silu_mul).
enum class LinearFusion : int { kNone = 0, kSiluMulIn = 1, kSiluMulOut = 2 };

// " (silu in)" / " (silu out)" / "" for log lines, and the name of the fusion's non-gemv option.
const char* linear_fusion_tag(LinearFusion f);
const char* linear_other_option(LinearFusion f);

// A shape of T tokens whose choice was timed, with more than one option.
struct LinearTunable {
  int64_t t = 0, n = 0, k = 0;  // out[t, n] = in[t, k] @ W[n, k]^T
  int out_dt = 0;
  bool bias = false;
  LinearFusion fusion = LinearFusion::kNone;
  bool before_attention = false;  // ops::LinearHint::kBeforeAttention
  std::vector<std::string> options;  // descriptions: the dispatch's choice, then the rest fastest alone first
  std::vector<float> alone_us;       // each option's time alone (us)
  int current = 0;                   // the option in use (0 unless linear_use_option changed it)
};

// The timed shapes of t tokens with more than one option, not yet marked with linear_tuning_done.
std::vector<LinearTunable> linear_tunables(int64_t t);

// From now on `shape` runs its option `option` (an index into shape.options).
void linear_use_option(const LinearTunable& shape, int option);

// `shape`'s choice is settled for the rest of the process (until linear_clear_choices): later runners do
// not tune it again, so one process computes every step with the same kernels (equal results for equal
// inputs, from one engine to the next).
void linear_tuning_done(const LinearTunable& shape);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
