// The weight table of a Qwen3 / Qwen2 / Llama / GLM-4 decoder (HF tensor names -> expected shapes) and the loader
// that validates a checkpoint against it and copies the weights, merged for the fused GEMMs, into owned
// memory on the target device.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/tensor.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/tensor_parallel_plan.h"

namespace nanovllm {

// H = hidden_size, I = intermediate_size, V = vocab_size, Hq/Hk = q/kv heads, D = head_dim;
// MoE layers: E = num_experts, Im = moe_intermediate_size.
struct LayerWeights {
  TensorView input_layernorm;           // [H]
  TensorView qkv_proj;                  // [(Hq + 2*Hk) * D, H]: q rows, then k rows, then v rows
  TensorView qkv_bias;                  // [(Hq + 2*Hk) * D], or undefined (default TensorView) without bias
  TensorView q_norm, k_norm;            // [D] or undefined (Qwen3 only)
  TensorView o_proj;                    // [H, Hq * D]
  TensorView o_bias;                    // [H], or undefined: only Qwen3/Llama with attention_bias = true
  TensorView post_attention_layernorm;  // [H]
  // Dense layers (undefined in MoE layers):
  TensorView gate_up_proj;              // [2 * I, H]: gate rows then up rows
  TensorView down_proj;                 // [H, I]
  // MoE layers (undefined in dense layers): the router and every expert's weights stacked.
  TensorView router;                    // [E, H]: mlp.gate.weight
  TensorView experts_gate_up;           // [E, 2 * Im, H]: expert e's gate rows then its up rows
  TensorView experts_down;              // [E, H, Im]
  // Block scales of the projections kept in fp8 (WeightLoadOptions::keep_fp8): the weight above is then
  // F8E4M3 and its scale f32 [rows / 128, cols / 128] (kernels/fp8_block.h); undefined for a dense weight.
  TensorView qkv_proj_scale, o_proj_scale, gate_up_proj_scale, down_proj_scale;
  // The experts' when kept fp8, per expert [rows / 128, cols / 128] stacked like the weights:
  TensorView experts_gate_up_scale;     // [E, 2 * Im / 128, H / 128]: expert e's gate rows' blocks, then its up rows'
  TensorView experts_down_scale;        // [E, H / 128, Im / 128]
  bool is_moe() const { return router.defined() && router.numel() > 0; }
};

struct ModelWeights {
  TensorView embed_tokens;  // [V, H]
  std::vector<LayerWeights> layers;
  TensorView norm;          // [H]
  TensorView lm_head;       // [V, H]; the same memory as embed_tokens when tied
  std::vector<Buffer> storage;  // owns everything above
};

struct WeightLoadOptions {
  std::optional<DType> dtype;  // convert every tensor to this (F32/BF16/F16); nullopt: keep checkpoint dtypes
  Allocator* allocator = &cpu_allocator();  // where the weights live
  // Copies host bytes to allocator memory (default: memcpy). The CUDA backend passes a device upload.
  std::function<void(void* dst, const void* src, size_t bytes)> upload;
  int num_threads = 0;  // conversion threads (0: min(hardware threads, 8))
  // Tensor parallel: load only this rank's slices (the plan's rows / columns of each projection, embedding and
  // LM head, zero-padded vocabulary rows; every expert's share of its intermediate columns, the router whole;
  // o_bias on rank 0 only, undefined elsewhere; norms whole), read
  // straight from the mapped checkpoint. The full checkpoint is still validated. Null: the whole model.
  const TensorParallelPlan* shard = nullptr;
  // Block-scaled fp8 projections (q/k/v/o, gate/up/down, experts; docs/fp8.md). A projection is fp8 when the
  // checkpoint holds it so (config.json's quantization_config) or when quantize_fp8 quantizes a dense
  // checkpoint's per 128 x 128 block at load. keep_fp8: fp8 projections stay e4m3 with f32 block scales
  // (LayerWeights' *_scale; rows, columns and every rank's slice on 128 boundaries, else an error naming the
  // tensor); otherwise they are dequantized to `dtype` (F32 when dtype is nullopt). MoE experts whose hidden size
  // or (rank's share of the) intermediate size is off the 128 grid are dequantized even under keep_fp8, for the
  // whole model, with one warning naming why (the layers still run: the expert kernels take bf16 too).
  bool quantize_fp8 = false;
  bool keep_fp8 = false;
};

// One checkpoint tensor the model expects, in HF naming.
struct WeightSpec {
  std::string name;  // e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
};

// One engine tensor and where it comes from: checkpoint tensors `parts`, concatenated by rows (q/k/v and
// gate/up are fused for the GEMMs). `canonical` splits the same rows into the tensors a transformers-native
// checkpoint holds (GLM-4's ChatGLM layout: query_key_value -> q_proj, k_proj, v_proj; equal to `parts`
// for the other layouts), so test checkpoints of both layouts can hold the same values.
// `stack` > 0: the parts are `stack` experts' tensors and the engine tensor [R, C] of their rows is viewed as
// [stack, R / stack, C] (the experts' gate_up and down weights).
// `quantizable`: projection weights, which block-scaled fp8 checkpoints (and --quantization fp8) store in e4m3;
// `scale_target` receives their block scales when the loader keeps them fp8 (stacked sources: viewed as
// [stack, rows / 128 / stack, cols / 128] like the weight).
struct WeightSource {
  TensorView* target = nullptr;  // into the ModelWeights passed to weight_sources (null without one)
  std::vector<WeightSpec> parts;
  std::vector<WeightSpec> canonical;
  int64_t stack = 0;
  bool quantizable = false;
  TensorView* scale_target = nullptr;
};

// Every engine tensor of `cfg` in a fixed order: embed_tokens, then per layer, then norm, then lm_head
// (untied only). With `w`, targets point into it (its layers are resized).
std::vector<WeightSource> weight_sources(const ModelConfig& cfg, ModelWeights* w = nullptr);

// True when checkpoint tensor `part` of `src` is block-scaled fp8 in a checkpoint for `cfg`: a projection of a
// model whose config.json has a block-scaled fp8 quantization_config, unless modules_to_not_convert lists it.
// The checkpoint then holds it as F8_E4M3 next to its scales, fp8_scale_name(part.name) of fp8_scale_shape.
bool is_fp8_checkpoint_part(const ModelConfig& cfg, const WeightSource& src, const WeightSpec& part);

// Every tensor a checkpoint for `cfg` must hold (no more, no less — besides ignorable extras such as
// rotary_emb.inv_freq), in a fixed order: embed_tokens, then per layer, then norm, then lm_head (untied only);
// an fp8 projection's block scales right after it.
std::vector<WeightSpec> weight_table(const ModelConfig& cfg);

// True for checkpoint tensors the loader ignores (rotary_emb.inv_freq / ChatGLM's rotary_pos_emb.inv_freq
// buffers; lm_head.weight when tied).
bool is_ignored_checkpoint_tensor(const std::string& name, const ModelConfig& cfg);

// Validates the checkpoint in `dir` (model.safetensors or a sharded index) against weight_table(cfg) and
// loads it. Throws nanovllm::Error naming the tensor, the expected vs actual shape/dtype and the file (an fp8
// projection must be F8_E4M3 with F32/BF16/F16 scales of finite values; no other tensor may be F8_E4M3).
ModelWeights load_weights(const std::filesystem::path& dir, const ModelConfig& cfg,
                          const WeightLoadOptions& opt = {});

}  // namespace nanovllm
