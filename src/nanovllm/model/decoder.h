// The Qwen3-family decoder (Qwen3, Qwen2/2.5, Llama-3.x, GLM-4: one decoder with small switches) as an explicit
// layer loop over ops.h. Backend-agnostic: the tensors' device picks the kernels. The runner owns the
// KV cache and the workspace and drives embed -> layer 0..L-1 -> head; the offload path drives layers
// one at a time, so each stage is its own call.
#pragma once

#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/communicator.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/moe_ops.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/model/attention_policy.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/layer_taps.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/weights.h"

namespace nanovllm {

// One layer's paged KV cache (kernels/kv_cache.h: elements of the activation dtype, or fp8 codes + scales).
struct LayerKvCache {
  KvCacheTensor k;  // [NB, BS, Hk, D]
  KvCacheTensor v;  // [NB, BS, Hk, D]
};

// Activation buffers for up to max_tokens tokens and max_seqs sampled rows (allocated by the runner
// with workspace_shapes() so the hot path never allocates).
struct DecoderWorkspace {
  TensorView hidden;       // [T, H]
  TensorView residual;     // [T, H]
  TensorView qkv;          // [T, (Hq + 2 Hk) D]
  TensorView q;            // [T, Hq, D]; [3 T, Hq, D] with Dual Chunk Attention (three rotations)
  TensorView attn_out;     // [T, Hq, D]
  TensorView gate_up;      // [T, 2 I]
  TensorView mlp_act;      // [T, I]
  // MoE models: the sparse MLP's scratch for up to min(T, moe chunk) tokens; longer steps run their MoE
  // layers in chunks of that many tokens (undefined in dense models).
  ops::MoeWorkspace moe;
  TensorView last_hidden;    // [S, H]
  TensorView last_residual;  // [S, H]
  TensorView logits;         // [S, V] f32 on every backend: sampling and logprobs want full precision
  // Tensor parallel only (N ranks, Vr = ceil(V / N)); undefined with one rank.
  TensorView logits_shard;     // [S, Vr] f32: this rank's LM head rows
  TensorView logits_gathered;  // [N S Vr] f32: every rank's logits_shard, rank-major
};

// One tensor-parallel rank's share of the decoder (docs/tensor_parallel.md): its plan (heads, MLP
// columns, vocabulary rows) and the collectives between the ops. The default is the whole model on one
// rank, with no communication.
struct TensorParallelRank {
  TensorParallelPlan plan;        // plan.size == 1: the whole model
  Communicator* comm = nullptr;   // required when plan.size > 1; outlives the model
};

// The step's inputs, on the model's device.
struct DecoderInputs {
  TensorView input_ids;    // [T] i32
  TensorView positions;    // [T] i32
  TensorView sample_rows;  // [S] i32: rows of the tokens whose next token is sampled
  AttentionMetadata attn;
  LayerTaps* taps = nullptr;  // optional observer of the layers' activations (layer_taps.h)
  AttentionPolicy* attention_policy = nullptr;  // a sparse policy (model/attention_policy.h); nullptr: dense
};

class Decoder {
 public:
  // `rope_inv_freq` [R/2] f32 (R = config.rope_dim()) lives on the weights' device. With several ranks,
  // `config` is the rank's (rank_config(): its heads and MLP columns, the full vocabulary) and `weights`
  // its shard (load_weights with WeightLoadOptions::shard); the all-reduces after the embedding, o_proj and down_proj and the
  // all-gather of the logits go through tp.comm.
  Decoder(ModelConfig config, ModelWeights weights, TensorView rope_inv_freq, float rope_attention_scaling,
          TensorParallelRank tp = {});

  const ModelConfig& config() const { return config_; }
  int64_t num_layers() const { return config_.num_hidden_layers; }
  DType activation_dtype() const { return act_dtype_; }
  const ModelWeights& weights() const { return weights_; }
  const ops::RopeParams& rope() const { return rope_; }
  float attention_scale() const { return attn_scale_; }
  const TensorParallelRank& tensor_parallel() const { return tp_; }

  // Tokens a MoE layer's scratch is sized for by default (longer steps run in chunks): bounds the
  // [chunk k, H] expert rows (Qwen3-30B-A3B: 4096 tokens x 8 x (2048 + 768) x 2 bytes = 185 MB in bf16)
  // while every expert still gets ~k * 4096 / E = 256 rows per chunk, GEMM-sized.
  static constexpr int64_t kMoeChunkTokens = 4096;

  // Workspace views carved from one arena for max_tokens tokens and max_seqs sampled rows; `c` the
  // rank's config and tp_size the number of ranks (the gathered logits). MoE models: scratch for
  // min(max_tokens, moe_chunk_tokens) tokens (0: kMoeChunkTokens).
  // With arena == nullptr only `bytes_out` is meaningful (the arena size to allocate).
  static DecoderWorkspace make_workspace(const ModelConfig& c, DType act, void* arena, Device dev,
                                         int64_t max_tokens, int64_t max_seqs, size_t* bytes_out = nullptr,
                                         int64_t tp_size = 1, int64_t moe_chunk_tokens = 0);

  // Full forward: logits for in.sample_rows go to ws.logits rows [0, S).
  void forward(const DecoderInputs& in, const std::vector<LayerKvCache>& kv, const DecoderWorkspace& ws,
               ops::Stream s = {}) const;

  // The stages, for drivers that interleave other work between layers. With several ranks a step's layers
  // run in order on the same inputs: layer l ends with the all-reduce fused with layer l + 1's input norm.
  void embed(const DecoderInputs& in, const DecoderWorkspace& ws, ops::Stream s = {}) const;
  void layer(int64_t l, const DecoderInputs& in, const LayerKvCache& kv, const DecoderWorkspace& ws,
             ops::Stream s = {}) const;
  void head(const DecoderInputs& in, const DecoderWorkspace& ws, ops::Stream s = {}) const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  ops::RopeParams rope_;
  ops::DualChunkParams dca_;  // config_.dual_chunk_attention for the kernels (chunk_len 0: off)
  DType act_dtype_;
  float attn_scale_;
  TensorParallelRank tp_;

  // hidden [T, H] = the layer's sparse MLP of hidden, in chunks of ws.capacity() tokens.
  void sparse_mlp(const LayerWeights& w, TensorView hidden, const ops::MoeWorkspace& ws, ops::Stream s) const;
  // The sum over ranks of a row-parallel result (nothing with one rank).
  void all_reduce(TensorView x, ops::Stream s) const;
  // residual += hidden (all-reduced over the ranks first when there are several); hidden =
  // rms_norm(residual) * norm_weight. hidden, residual [T, H].
  void reduce_add_norm(TensorView hidden, TensorView residual, TensorView norm_weight, ops::Stream s) const;
};

}  // namespace nanovllm
