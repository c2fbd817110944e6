#include "nanovllm/model/tensor_parallel_weights.h"

#include "nanovllm/core/error.h"

namespace nanovllm {
namespace {

// Cuts `slice` of `src` (1-D: [n] as [n, 1]; 2-D: [rows, cols]) into a new buffer owned by `out`.
TensorView cut(const TensorView& src, const ShardSlice& slice, int64_t rank, ModelWeights& out) {
  if (!src.defined() || src.data() == nullptr) return {};
  if (slice.axis == ShardSlice::Axis::kFirstRankOnly && rank != 0) return {};
  NANOVLLM_CHECK(src.device().is_cpu(), "shard_weights: weights must be on the host");
  NANOVLLM_CHECK(src.ndim() == 1 || src.ndim() == 2, "shard_weights: a ", src.ndim(), "-D weight");
  const int64_t rows = src.dim(0), cols = src.ndim() == 2 ? src.dim(1) : 1;
  Shape shape = src.shape();
  if (slice.axis == ShardSlice::Axis::kRows) shape = src.ndim() == 2 ? Shape{slice.extent(), cols} : Shape{slice.extent()};
  if (slice.axis == ShardSlice::Axis::kColumns) {
    NANOVLLM_CHECK(src.ndim() == 2, "shard_weights: column split of a 1-D weight");
    shape = Shape{rows, slice.extent()};
  }
  Buffer& buf = out.storage.emplace_back(cpu_allocator(), src.dtype(), shape);
  copy_shard(slice, src.data(), rows, cols, static_cast<int64_t>(dtype_size(src.dtype())), buf.data());
  return buf.view();
}

}  // namespace

ModelWeights shard_weights(const ModelWeights& full, const ModelConfig& cfg, const TensorParallelPlan& plan) {
  NANOVLLM_CHECK(static_cast<int64_t>(full.layers.size()) == cfg.num_hidden_layers, "shard_weights: ",
                 full.layers.size(), " layers, the config has ", cfg.num_hidden_layers);
  const ShardSlice replicated{};
  ModelWeights w;
  w.embed_tokens = cut(full.embed_tokens, plan.embed_tokens, plan.rank, w);
  const bool tied = full.lm_head.data() == full.embed_tokens.data();
  w.lm_head = tied ? w.embed_tokens : cut(full.lm_head, plan.lm_head, plan.rank, w);
  w.norm = cut(full.norm, replicated, plan.rank, w);
  for (const LayerWeights& f : full.layers) {
    LayerWeights& l = w.layers.emplace_back();
    l.input_layernorm = cut(f.input_layernorm, replicated, plan.rank, w);
    l.qkv_proj = cut(f.qkv_proj, plan.qkv_proj, plan.rank, w);
    l.qkv_bias = cut(f.qkv_bias, plan.qkv_bias, plan.rank, w);
    l.q_norm = cut(f.q_norm, replicated, plan.rank, w);
    l.k_norm = cut(f.k_norm, replicated, plan.rank, w);
    l.o_proj = cut(f.o_proj, plan.o_proj, plan.rank, w);
    l.o_bias = cut(f.o_bias, plan.o_bias, plan.rank, w);
    l.post_attention_layernorm = cut(f.post_attention_layernorm, replicated, plan.rank, w);
    l.gate_up_proj = cut(f.gate_up_proj, plan.gate_up_proj, plan.rank, w);
    l.down_proj = cut(f.down_proj, plan.down_proj, plan.rank, w);
  }
  return w;
}

}  // namespace nanovllm
