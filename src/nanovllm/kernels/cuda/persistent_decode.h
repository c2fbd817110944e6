// Persistent decode: every decoder layer of one sequence's one decode token (batch size 1) in a single
// cooperative kernel, for the bs=1 latency path (host side; the kernel is persistent_decode.cu).
//
// Why: at batch size 1 a Qwen3-0.6B layer streams its 31.5 MB of weights in ~7.4 us, but as eight
// dependent kernels (norm, qkv, prologue, attention, o, norm, gate_up, down) it took ~33 us: every
// kernel boundary costs its launch, wait and tail, and the weights of kernel n + 1 cannot stream while
// kernel n waits for its input. Here one CTA per SM runs the layers' phases separated by grid
// barriers, and a producer warp per CTA streams the CTA's slice of every weight matrix, layer after
// layer, through a shared-memory ring with bulk copies: weights do not depend on activations, so the
// stream never waits for a barrier and the phases find their weights already in shared memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"

#if NANOVLLM_WITH_CUDA

#include <cuda_runtime.h>

namespace nanovllm::cuda_ops {

// One layer's weights (bf16, the shapes of LayerWeights; the biases must be undefined) and KV cache
// ([NB, BS, Hk, D] bf16 each).
struct PersistentDecodeLayer {
  TensorView input_layernorm, qkv_proj, qkv_bias, q_norm, k_norm, o_proj, o_bias, post_attention_layernorm,
      gate_up_proj, down_proj;
  TensorView k_cache, v_cache;
};

struct PersistentDecodeModel {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  float rms_norm_eps = 1e-6f;
  float attn_scale = 0.0f;   // softmax scale (1 / sqrt(D))
  TensorView rope_inv_freq;  // [D/2] f32 on the device
  float rope_attention_scaling = 1.0f;
  std::vector<PersistentDecodeLayer> layers;
};

// Empty when the persistent kernel can run this model on `device`; otherwise why not (the caller keeps
// the layer-by-layer path). Needs sm_90 (bulk copies), bf16 weights without biases, head_dim 64/128/256,
// a GQA group of at most 8 (4 for head_dim 256) and rows of at most 12,288 elements.
std::string persistent_decode_unsupported(const PersistentDecodeModel& m, int device);

// NANOVLLM_PERSISTENT_DECODE=1 in the environment turns the path on. Off by default: on the H200 it is
// not yet faster than the layer loop (bench/results/2026-11-24-h200-cuda-perf-session10.md).
bool persistent_decode_enabled();

class PersistentDecoder {
 public:
  // Throws nanovllm::Error when persistent_decode_unsupported() says why.
  PersistentDecoder(const PersistentDecodeModel& m, int device);
  ~PersistentDecoder();
  PersistentDecoder(const PersistentDecoder&) = delete;
  PersistentDecoder& operator=(const PersistentDecoder&) = delete;

  // All layers for one decode token. hidden [1, H] holds layer 0's input (the embedding) and residual
  // [1, H] is overwritten; on return they hold what the layer loop leaves (hidden: the last layer's MLP
  // output; residual: the running sum before it), so Qwen3Model::head() follows unchanged. meta: one
  // sequence with one query token; positions [1] i32. The new token's K/V go to the caches at
  // meta.slot_mapping[0]. No allocation, no host sync: graph-capturable.
  void run(TensorView hidden, TensorView residual, TensorView positions, const AttentionMetadata& meta,
           cudaStream_t st);

  int grid_size() const { return grid_; }
  // Benchmarks: launches that follow record CTA 0's trace into `stamps` [1 + 2 kTraceMarks L] on the
  // device: [0] the start, then for mark m of layer l at 1 + 2 (kTraceMarks l + m) the time (globaltimer
  // ns) and the SM cycles (clock64) its thread 0 waited for weight pieces since the previous mark. The marks, in order:
  // norm, qkv, keys, barrier, attention, barrier, o input, o, barrier, norm, gate_up, barrier, down
  // input, down, barrier (the last layer's last one without a barrier). nullptr stops recording.
  static constexpr int kTraceMarks = 15;
  void set_trace(unsigned long long* stamps) { trace_ = stamps; }

 private:
  PersistentDecodeModel model_;
  int grid_ = 0;
  void* layers_dev_ = nullptr;  // [L] device layer descriptors
  void* scratch_ = nullptr;     // qkv, attention output, MLP activation, split partials, barrier counters
  struct Layout;                // the launch parameters that do not change between steps (the .cu)
  std::unique_ptr<Layout> fixed_;
  unsigned long long* trace_ = nullptr;
};

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
