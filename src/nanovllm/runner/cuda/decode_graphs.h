// The CUDA graphs of a CudaModelRunner's decode steps: one per (batch bucket, block-table stride), each
// captured once, after an eager warm-up forward with the capture's exact metadata (which picks kernels and
// grows workspaces, so the capture allocates nothing). At a bucket's first capture two choices are tuned
// on whole graphs, replayed on 1K-token contexts, since what is fastest alone is not always fastest
// inside a graph of PDL-overlapped kernels:
//  * the RMSNorm kernels' PDL early trigger (KernelOptions::pdl_early_norm): which pays differs by model
//    (H200, bs=1 @1K, off / forced on: Qwen3-0.6B 0.857-0.861 / 0.827-0.831 ms/token, Qwen3-8B
//    4.490-4.493 / 4.540-4.542; docs/experiments.md, "PDL early norm"). NANOVLLM_PDL_EARLY_NORM=0/1 fixes
//    it instead. Outside the graphs (eager steps: the offloaded decode step, prefill) it is off;
//  * with tune_linear (NANOVLLM_TUNE_LINEAR unset or not 0, and one rank), each projection's kernel among
//    the options nearly as fast alone (linear_tuning.h). Never with tensor parallel: which options a rank
//    tries depends on its own timings, so the ranks would replay different numbers of graphs, each holding
//    all-reduces, and the collectives no longer pair up. That is where the 2-GPU hang of issue #34 was
//    caught (docs/experiments.md, "CUDA tensor parallel hang": one rank timing a linear option's graphs,
//    the other still in its eager warm-up); with one rank tuning, TP2 runs on 2 x H200 (bench/README.md,
//    2 x H200 table). The early-trigger choice replays the same count on every rank.
// The decisions live here (per bucket) and in the runner's DeviceContext (the linear choices).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include <cuda_runtime.h>

#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/model/decoder.h"
#include "nanovllm/runner/forward_batch.h"

namespace nanovllm {

class DecodeGraphs {
 public:
  using Forward = std::function<void(const DecoderInputs&)>;  // one decode step on `stream` (or captured)
  using Upload = std::function<void(const ForwardBatch&)>;    // a batch's packed inputs to where `in` points

  DecodeGraphs(cudaStream_t stream, cuda_ops::DeviceContext& kernels, Forward forward, Upload upload,
               bool tune_linear);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // The graph of a decode step of `bucket` rows with block tables of `stride` entries; captured (and, at
  // the bucket's first capture, tuned) when new. `in` views the step's uploaded inputs, `batch` is that
  // upload (restored after the tuning replays); timing contexts use blocks [0, num_kv_blocks).
  cudaGraphExec_t get(int64_t bucket, int64_t stride, const DecoderInputs& in, const ForwardBatch& batch,
                      int64_t num_kv_blocks);
  size_t size() const { return graphs_.size(); }

 private:
  // The step of `in` captured into an instantiated graph with the context's current options.
  cudaGraphExec_t capture(const DecoderInputs& in);
  // The faster of two captures: the norm's early trigger on and off. Kept per bucket for its other strides.
  cudaGraphExec_t capture_tuned(const DecoderInputs& in, const ForwardBatch& batch, int64_t bucket,
                                int64_t num_kv_blocks);
  // The bucket's linear shapes, largest weights first: each shape's options that were nearly as fast
  // alone are captured in turn and timed against `exec`; the fastest graph is kept (and returned, `exec`
  // destroyed if replaced) with its options in use.
  cudaGraphExec_t tune_linear_choices(const DecoderInputs& in, int64_t bucket, cudaGraphExec_t exec);
  std::array<double, 2> time_graphs(cudaGraphExec_t a, cudaGraphExec_t b);  // per-replay ms

  cudaStream_t stream_;
  cuda_ops::DeviceContext& kernels_;
  Forward forward_;
  Upload upload_;
  bool tune_linear_;  // tune the linear choices on whole graphs (one rank only, see above)
  std::map<std::pair<int64_t, int64_t>, cudaGraphExec_t> graphs_;  // (bucket, table stride) -> graph
  std::map<int64_t, bool> early_norm_;                             // bucket -> its graphs' early trigger
};

}  // namespace nanovllm
