// The linear dispatch's kernel choices (linear.cu) and their in-context tuning. The dispatch picks a kernel for each
// decode-sized shape by timing every option alone, at the shape's first use. Inside a decode graph the projections
// overlap their neighbours through PDL and stream L2-cold weights, so the fastest alone is not always the fastest
// there (on an H100 with the Qwen3-8B shapes, an option 5% faster alone made the bs=1 step 4.6% slower:
// docs/experiments.md, "In-graph linear tuning"). The CUDA runner therefore times whole decode graphs with each
// option of a shape (DecodeGraphs) and keeps the fastest. Choices live in the runner's DeviceContext, so they hold
// for that runner's lifetime (every step of one engine computes with the same kernels) and one runner's tuning never
// moves another's.
// Plain C++ declarations (no device code).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nanovllm/kernels/cuda/gemv.cuh"

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

// A projection shape whose kernel is chosen by timing: out[t, n] = in[t, k] @ W[n, k]^T.
struct LinearShape {
  int64_t t = 0, n = 0, k = 0;
  int out_dt = 0;
  bool bias = false;
  LinearFusion fusion = LinearFusion::kNone;
  bool before_attention = false;  // ops::LinearHint::kBeforeAttention: gemv at one CTA per SM preferred
  bool operator<(const LinearShape& o) const {
    return std::tie(t, n, k, out_dt, bias, fusion, before_attention) <
           std::tie(o.t, o.n, o.k, o.out_dt, o.bias, o.fusion, o.before_attention);
  }
};

// One option of a shape: gemv with a launch shape, or the shape's other option (linear_other_option).
struct LinearChoice {
  bool gemv = true;
  bool timed = false;  // false: gemv's default launch shape (a shape first seen while capturing a graph)
  GemvConfig cfg;
};
std::string describe(const LinearChoice& c, LinearFusion f);

// A timed shape with more than one option, as the in-graph tuner sees it.
struct LinearTunable {
  LinearShape shape;
  std::vector<std::string> options;  // descriptions: the dispatch's choice, then the rest fastest alone first
  std::vector<float> alone_us;       // each option's time alone (us)
  int current = 0;                   // the option in use
};

// Every timed shape's options (fastest alone first, a preferred one before all) and the one in use.
class LinearChoices {
 public:
  // The option in use for `shape`, if it was timed.
  std::optional<LinearChoice> find(const LinearShape& shape) const;
  // Records `shape`'s timed options (options[0] in use); returns options[0].
  LinearChoice record(const LinearShape& shape, std::vector<LinearChoice> options, std::vector<float> alone_us);
  // The timed shapes of t tokens with more than one option, not yet marked with mark_tuned.
  std::vector<LinearTunable> tunables(int64_t t) const;
  // From now on `shape` runs its option `option` (an index into its options).
  void use_option(const LinearShape& shape, int option);
  // `shape`'s choice is settled: later graph captures of this context do not tune it again.
  void mark_tuned(const LinearShape& shape);

 private:
  struct Options {
    std::vector<LinearChoice> choices;
    std::vector<float> alone_us;
    int current = 0;
    bool tuned = false;
  };
  Options& options_of(const LinearShape& shape);
  mutable std::mutex mu_;
  std::map<LinearShape, Options> shapes_;
};

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
