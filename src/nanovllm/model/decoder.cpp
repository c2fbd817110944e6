#include "nanovllm/model/decoder.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "nanovllm/kernels/dual_chunk_ops.h"

namespace nanovllm {
namespace {

// Sub-views of the workspace for the step's T tokens and S sampled rows.
struct StepViews {
  TensorView hidden, residual, qkv, q, attn_out, gate_up, mlp_act;
};

StepViews step_views(const DecoderWorkspace& ws, int64_t t) {
  return {ws.hidden.slice_rows(0, t),  ws.residual.slice_rows(0, t), ws.qkv.slice_rows(0, t),
          ws.q.slice_rows(0, t),       ws.attn_out.slice_rows(0, t), ws.gate_up.slice_rows(0, t),
          ws.mlp_act.slice_rows(0, t)};
}

// Taps of the attention output and of the step's k and v, read back from the cache rows the step wrote
// (through `scratch`, q's buffer, free once the attention ran).
void tap_attention_outputs(int64_t l, LayerTaps* taps, const DecoderInputs& in, const LayerKvCache& kv,
                           TensorView attn_out, TensorView scratch, ops::Stream s) {
  taps->record(l, TapPoint::kAttn, attn_out, TensorView(), s);
  const int64_t t = in.attn.num_tokens, hk = kv.k.dim(2), d = kv.k.dim(3), slots = kv.k.dim(0) * kv.k.dim(1);
  const TensorView rows(scratch.data(), scratch.dtype(), Shape{t, hk * d}, scratch.device());  // [T, Hk D]
  for (const auto& [cache, point] : {std::pair{kv.k, TapPoint::kK}, std::pair{kv.v, TapPoint::kV}}) {
    if (cache.fp8()) {
      ops::gather_kv_rows(rows.reshape({t, hk, d}), cache, in.attn.slot_mapping, s);  // dequantized
    } else {
      ops::gather_rows(rows, cache.reshape({slots, hk * d}), in.attn.slot_mapping, s);
    }
    taps->record(l, point, rows.reshape({t, hk, d}), TensorView(), s);
  }
}

// The layer's attention as separate ops, for when q must exist in memory (the fused CUDA decode kernel
// never writes it): taps record it, a sparse policy scores pages with it. q and the K/V store, the
// policy's attention or the dense one, then the taps of the output and of k and v (read back from the
// cache rows the step wrote, through q's buffer, free once the attention ran).
void unfused_attention(int64_t l, LayerTaps* taps, AttentionPolicy* policy, const LayerWeights& w, float eps,
                       const ops::RopeParams& rope, float scale, const DecoderInputs& in, const LayerKvCache& kv,
                       const StepViews& v, ops::Stream s) {
  ops::qkv_prologue(v.q, v.qkv, w.q_norm, w.k_norm, eps, in.positions, rope, kv.k, kv.v, in.attn, s);  // [T, Hq, D]
  if (taps) taps->record(l, TapPoint::kQ, v.q, TensorView(), s);
  if (policy == nullptr || !policy->attend(l, v.attn_out, v.q, kv, in.attn, scale, s))
    ops::paged_attention(v.attn_out, v.q, kv.k, kv.v, in.attn, scale, s);  // [T, Hq, D]
  if (taps) tap_attention_outputs(l, taps, in, kv, v.attn_out, v.q, s);
}

// Dual Chunk Attention (kernels/dual_chunk_ops.h, docs/dual_chunk_attention.md): q in three rotations
// [3, T, Hq, D] in the workspace's q buffer (3 T rows), the key rotated at its position modulo the chunk, then
// the three partial attentions merged. Taps see the intra-chunk rotation as q (the plain one within the first
// chunk). A sparse policy gets the three rotations (AttentionPolicy::attend_dual_chunk) and may attend instead.
void dual_chunk_attention(int64_t l, LayerTaps* taps, AttentionPolicy* policy, const LayerWeights& w, float eps,
                          const ops::RopeParams& rope,
                          const ops::DualChunkParams& dca, float scale, const DecoderInputs& in, const LayerKvCache& kv,
                          const DecoderWorkspace& ws, const StepViews& v, ops::Stream s) {
  const int64_t t = in.attn.num_tokens, hq = ws.q.dim(1), d = ws.q.dim(2);
  const TensorView q3 = ws.q.slice_rows(0, 3 * t).reshape({3, t, hq, d});  // [3, T, Hq, D]
  ops::dual_chunk_qkv_prologue(q3, v.qkv, w.q_norm, w.k_norm, eps, in.positions, rope, dca, kv.k, kv.v, in.attn, s);
  if (taps) taps->record(l, TapPoint::kQ, v.q, TensorView(), s);  // [T, Hq, D]: q3[0]
  if (policy == nullptr || !policy->attend_dual_chunk(l, v.attn_out, q3, kv, in.attn, dca, scale, s))
    ops::dual_chunk_attention(v.attn_out, q3, kv.k, kv.v, in.attn, dca, scale, s);  // [T, Hq, D]
  if (taps) tap_attention_outputs(l, taps, in, kv, v.attn_out, v.q, s);
}

// A projection whose weight is dense, or block-scaled fp8 when its scale is defined (LayerWeights' *_scale).
void project(TensorView out, TensorView in, TensorView weight, TensorView scale, TensorView bias, ops::Stream s,
             ops::LinearHint hint = ops::LinearHint::kNone) {
  if (scale.defined()) {
    ops::linear_fp8(out, in, weight, scale, bias, s);
  } else {
    ops::linear(out, in, weight, bias, s, hint);
  }
}

}  // namespace

Decoder::Decoder(ModelConfig config, ModelWeights weights, TensorView rope_inv_freq,
                 float rope_attention_scaling, TensorParallelRank tp)
    : config_(std::move(config)), weights_(std::move(weights)), tp_(std::move(tp)) {
  NANOVLLM_CHECK(tp_.plan.size == 1 || (tp_.comm != nullptr && tp_.comm->size() == tp_.plan.size &&
                                        tp_.comm->rank() == tp_.plan.rank),
                 "Decoder: rank ", tp_.plan.rank, " of ", tp_.plan.size, " needs that rank's communicator");
  rope_.inv_freq = rope_inv_freq;
  rope_.attention_scaling = rope_attention_scaling;
  rope_.interleaved = config_.rope_interleaved;  // GLM-4
  const DualChunkAttention& dca = config_.dual_chunk_attention;
  if (dca.enabled()) {
    dca_.chunk_len = dca.chunk_len();
    dca_.chunk_size = dca.chunk_size;
    dca_.original_max_position_embeddings = dca.original_max_position_embeddings;
  }
  act_dtype_ = weights_.embed_tokens.device().is_cpu() ? DType::kF32 : DType::kBF16;
  attn_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.head_dim)));
}

DecoderWorkspace Decoder::make_workspace(const ModelConfig& c, DType act, void* arena, Device dev,
                                         int64_t max_tokens, int64_t max_seqs, size_t* bytes_out,
                                         int64_t tp_size, int64_t moe_chunk_tokens) {
  size_t offset = 0;
  auto take = [&](DType dt, Shape shape) {
    TensorView v(arena ? static_cast<char*>(arena) + offset : nullptr, dt, shape, dev);
    offset += (v.nbytes() + 255) / 256 * 256;  // 256-byte aligned sub-buffers
    return v;
  };
  const int64_t t = max_tokens, h = c.hidden_size, d = c.head_dim;
  DecoderWorkspace ws;
  ws.hidden = take(act, {t, h});
  ws.residual = take(act, {t, h});
  ws.qkv = take(act, {t, c.q_size() + 2 * c.kv_size()});
  // Dual Chunk Attention keeps three rotations of q: [3 T, Hq, D] (dual_chunk_attention above).
  ws.q = take(act, {(c.dual_chunk_attention.enabled() ? 3 : 1) * t, c.num_attention_heads, d});
  ws.attn_out = take(act, {t, c.num_attention_heads, d});
  ws.gate_up = take(act, {t, 2 * c.intermediate_size});
  ws.mlp_act = take(act, {t, c.intermediate_size});
  if (c.moe.enabled()) {
    const int64_t n = std::min(max_tokens, moe_chunk_tokens > 0 ? moe_chunk_tokens : kMoeChunkTokens);
    const int64_t e = c.moe.num_experts, pairs = n * c.moe.num_experts_per_tok;
    ws.moe.router_logits = take(act, {n, e});
    ws.moe.topk_ids = take(DType::kI32, {n, c.moe.num_experts_per_tok});
    ws.moe.topk_weights = take(DType::kF32, {n, c.moe.num_experts_per_tok});
    ws.moe.groups.expert_offsets = take(DType::kI32, {e + 1});
    ws.moe.groups.sorted_pairs = take(DType::kI32, {pairs});
    ws.moe.groups.pair_rows = take(DType::kI32, {pairs});
    ws.moe.groups.active_experts = take(DType::kI32, {e});
    ws.moe.act = take(act, {pairs, c.moe.moe_intermediate_size});
    ws.moe.rows = take(act, {pairs, h});
  }
  ws.last_hidden = take(act, {max_seqs, h});
  ws.last_residual = take(act, {max_seqs, h});
  ws.logits = take(DType::kF32, {max_seqs, c.vocab_size});
  if (tp_size > 1) {
    const int64_t per_rank = (c.vocab_size + tp_size - 1) / tp_size;
    ws.logits_shard = take(DType::kF32, {max_seqs, per_rank});
    ws.logits_gathered = take(DType::kF32, {tp_size * max_seqs * per_rank});
  }
  if (bytes_out) *bytes_out = offset;
  return ws;
}

void Decoder::forward(const DecoderInputs& in, const std::vector<LayerKvCache>& kv, const DecoderWorkspace& ws,
                      ops::Stream s) const {
  NANOVLLM_CHECK(static_cast<int64_t>(kv.size()) == num_layers(), "KV cache has ", kv.size(), " layers, model ",
                 num_layers());
  embed(in, ws, s);
  for (int64_t l = 0; l < num_layers(); ++l) layer(l, in, kv[static_cast<size_t>(l)], ws, s);
  head(in, ws, s);
}

void Decoder::all_reduce(TensorView x, ops::Stream s) const {
  if (tp_.plan.size > 1) tp_.comm->all_reduce_sum(x, s);
}

void Decoder::embed(const DecoderInputs& in, const DecoderWorkspace& ws, ops::Stream s) const {
  const StepViews v = step_views(ws, in.attn.num_tokens);
  if (tp_.plan.size == 1) {
    ops::embedding(v.hidden, in.input_ids, weights_.embed_tokens, s);  // [T, H]
    return;
  }
  // Each rank has its vocabulary rows; the other ids give zeros, and the sum over ranks is the embedding.
  ops::embedding_vocab_shard(v.hidden, in.input_ids, weights_.embed_tokens, tp_.plan.vocab.begin, s);  // [T, H]
  all_reduce(v.hidden, s);
}

// hidden holds the layer input; residual the running sum (unused before layer 0).
void Decoder::layer(int64_t l, const DecoderInputs& in, const LayerKvCache& kv, const DecoderWorkspace& ws,
                    ops::Stream s) const {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
  const StepViews v = step_views(ws, in.attn.num_tokens);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int64_t t = in.attn.num_tokens;
  LayerTaps* taps = in.taps != nullptr && in.taps->wants(l) ? in.taps : nullptr;
  if (taps) taps->record(l, TapPoint::kInput, v.hidden, l == 0 ? TensorView() : v.residual, s);

  // Attention block: residual = hidden (+ previous residual), hidden = norm(residual). With several ranks
  // the previous layer's all-reduce did the add and the norm (reduce_add_norm).
  if (l == 0) {
    ops::copy_rms_norm(v.hidden, v.residual, w.input_layernorm, eps, s);
  } else if (tp_.plan.size == 1) {
    ops::add_rms_norm(v.hidden, v.residual, w.input_layernorm, eps, s);
  }
  project(v.qkv, v.hidden, w.qkv_proj, w.qkv_proj_scale, w.qkv_bias, s, ops::LinearHint::kBeforeAttention);  // [T, (Hq + 2 Hk) D]
  if (config_.dual_chunk_attention.enabled()) {
    dual_chunk_attention(l, taps, in.attention_policy, w, eps, rope_, dca_, attn_scale_, in, kv, ws, v, s);
  } else if (taps || in.attention_policy) {
    unfused_attention(l, taps, in.attention_policy, w, eps, rope_, attn_scale_, in, kv, v, s);
  } else {
    ops::qkv_prologue_attention(v.attn_out, v.q, v.qkv, w.q_norm, w.k_norm, eps, in.positions, rope_, kv.k, kv.v,
                                in.attn, attn_scale_, s);  // [T, Hq, D]
  }
  project(v.hidden, v.attn_out.reshape({t, config_.q_size()}), w.o_proj, w.o_proj_scale, w.o_bias, s);  // [T, H]

  // MLP block (row-parallel o_proj: each rank's heads' share, o_bias on rank 0 only).
  reduce_add_norm(v.hidden, v.residual, w.post_attention_layernorm, s);
  if (w.is_moe()) {
    sparse_mlp(w, v.hidden, ws.moe, s);  // [T, H]
  } else if (w.gate_up_proj_scale.defined() || w.down_proj_scale.defined()) {  // fp8: gate_up + silu_mul, then down
    if (w.gate_up_proj_scale.defined()) {
      ops::linear_fp8_silu(v.mlp_act, v.hidden, w.gate_up_proj, w.gate_up_proj_scale, v.gate_up, s);  // [T, I]
    } else {
      ops::linear(v.gate_up, v.hidden, w.gate_up_proj, TensorView(), s);  // [T, 2 I]
      ops::silu_mul(v.mlp_act, v.gate_up, s);                             // [T, I]
    }
    project(v.hidden, v.mlp_act, w.down_proj, w.down_proj_scale, TensorView(), s);  // [T, H]
  } else {
    // [T, H]; gate_up [T, 2 I] and mlp_act [T, I] scratch
    ops::silu_mlp(v.hidden, v.hidden, w.gate_up_proj, w.down_proj, v.gate_up, v.mlp_act, s);
  }
  if (tp_.plan.size > 1) {  // row-parallel: each rank's intermediate columns' share
    if (l + 1 < num_layers()) {
      reduce_add_norm(v.hidden, v.residual, weights_.layers[static_cast<size_t>(l + 1)].input_layernorm, s);
    } else {
      all_reduce(v.hidden, s);  // the head adds the residual for the sampled rows only
    }
  }
  if (taps) taps->record(l, TapPoint::kOutput, v.hidden, v.residual, s);  // the residual add is the next layer's
}

void Decoder::sparse_mlp(const LayerWeights& w, TensorView hidden, const ops::MoeWorkspace& ws,
                         ops::Stream s) const {
  const int64_t t = hidden.dim(0), chunk = ws.capacity();
  NANOVLLM_CHECK(chunk > 0, "Decoder: a MoE layer needs the workspace's MoE scratch (make_workspace)");
  for (int64_t b = 0; b < t; b += chunk) {
    const TensorView rows = hidden.slice_rows(b, std::min(t, b + chunk));  // [n, H]
    ops::moe_mlp(rows, rows, w.router,
                 {w.experts_gate_up, w.experts_down, w.experts_gate_up_scale, w.experts_down_scale},
                 config_.moe.norm_topk_prob, ws, s);
  }
}

void Decoder::reduce_add_norm(TensorView hidden, TensorView residual, TensorView norm_weight,
                              ops::Stream s) const {
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (tp_.plan.size > 1) tp_.comm->all_reduce_add_rms_norm(hidden, residual, norm_weight, eps, s);
  else ops::add_rms_norm(hidden, residual, norm_weight, eps, s);
}

void Decoder::head(const DecoderInputs& in, const DecoderWorkspace& ws, ops::Stream s) const {
  const StepViews v = step_views(ws, in.attn.num_tokens);
  const int64_t num_sampled = in.sample_rows.numel();
  if (num_sampled == 0) return;
  // Only the sampled rows need the last residual add, the final norm and the LM head.
  TensorView hidden = ws.last_hidden.slice_rows(0, num_sampled);      // [S, H]
  TensorView residual = ws.last_residual.slice_rows(0, num_sampled);  // [S, H]
  ops::gather_add_rms_norm(hidden, residual, v.hidden, v.residual, in.sample_rows, weights_.norm,
                           static_cast<float>(config_.rms_norm_eps), s);
  if (tp_.plan.size == 1) {
    ops::linear(ws.logits.slice_rows(0, num_sampled), hidden, weights_.lm_head, TensorView(), s);  // [S, V]
    return;
  }
  // Vocab-parallel: each rank's rows of the logits, gathered rank-major, then the padding dropped.
  const TensorView shard = ws.logits_shard.slice_rows(0, num_sampled);  // [S, Vr]
  ops::linear(shard, hidden, weights_.lm_head, TensorView(), s);
  const int64_t n = tp_.plan.size, per_rank = ws.logits_shard.dim(1);
  const TensorView gathered(ws.logits_gathered.data(), DType::kF32, Shape{n, num_sampled, per_rank},
                            ws.logits_gathered.device());  // [N, S, Vr]
  tp_.comm->all_gather(shard, gathered, s);
  ops::gather_vocab_shards(ws.logits.slice_rows(0, num_sampled), gathered, s);  // [S, V]
}

}  // namespace nanovllm
