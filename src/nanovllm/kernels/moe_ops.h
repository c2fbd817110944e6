// Mixture-of-experts op entry points (Qwen3-MoE; docs/moe.md). Each validates shapes, dtypes and devices and
// dispatches to kernels/cpu (the reference) or kernels/cuda, like ops.h.
//
// Shapes: T tokens, E experts, k experts per token, P = T k (token, slot) pairs — pair p = t k + j is
// token t's j-th choice —, H hidden size, Im the experts' intermediate size. Expert weights are stacked
// (MoeExpertWeights): gate_up [E, 2 Im, H] (expert e's gate rows, then its up rows), down [E, H, Im].
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

// The pairs grouped by expert: a permutation, nothing is copied.
struct MoeGroups {
  TensorView expert_offsets;  // [E + 1] i32: expert e's pairs sit at rows [offsets[e], offsets[e + 1])
  TensorView sorted_pairs;    // [P] i32: row r holds pair sorted_pairs[r]
  TensorView pair_rows;       // [P] i32: the inverse, the row of pair p
  TensorView active_experts;  // [E] i32: the experts with pairs in increasing order, then -1s
};

// The stacked expert weights of a sparse layer: float (F32 / BF16 / F16, both alike), or block-scaled fp8 on CUDA
// (docs/fp8.md: e4m3 codes, value = code x the f32 scale of its 128 x 128 block of the expert's matrix; H and Im
// multiples of 128). The CPU kernels take float weights only: its backend loads fp8 checkpoints dequantized.
struct MoeExpertWeights {
  MoeExpertWeights() = default;
  // {gate_up, down} for float experts (braced at call sites).
  MoeExpertWeights(TensorView gate_up_w, TensorView down_w, TensorView gate_up_scale_f32 = {},
                   TensorView down_scale_f32 = {})
      : gate_up(gate_up_w), down(down_w), gate_up_scale(gate_up_scale_f32), down_scale(down_scale_f32) {}
  TensorView gate_up;        // [E, 2 Im, H]: expert e's gate rows, then its up rows
  TensorView down;           // [E, H, Im]
  TensorView gate_up_scale;  // fp8: [E, 2 Im / 128, H / 128] f32 (the gate rows' blocks, then the up rows'); else undefined
  TensorView down_scale;     // fp8: [E, H / 128, Im / 128] f32; else undefined
  bool fp8() const { return gate_up.defined() && gate_up.dtype() == DType::kF8E4M3; }
};

// Scratch of moe_mlp for up to `tokens` tokens (carved by the caller, e.g. the decoder's workspace arena).
struct MoeWorkspace {
  TensorView router_logits;  // [T, E] activation dtype (as transformers, which rounds the gate's output)
  TensorView topk_ids;       // [T, k] i32
  TensorView topk_weights;   // [T, k] f32
  MoeGroups groups;
  TensorView act;            // [P, Im] activation dtype: silu(gate) * up of every row
  TensorView rows;           // [P, H] activation dtype: every row's expert output

  int64_t capacity() const { return topk_ids.ndim() == 2 ? topk_ids.dim(0) : 0; }  // tokens
  // The views for the first `tokens` tokens (<= capacity()).
  MoeWorkspace first(int64_t tokens) const;
};

// The routing of T tokens, as transformers' Qwen3MoeSparseMoeBlock: p = softmax(router_logits[t]) in fp32;
// topk_ids[t] = the experts of the k largest p in decreasing order and topk_weights[t] their p, divided by
// their sum when `renormalize`. Equal probabilities are ordered as torch.topk orders them on the CPU (the
// CPU reference runs its algorithm: std::partial_sort when 64 k <= E, else std::nth_element then std::sort of
// the first k - 1, over (p, expert) pairs compared by p alone); on CUDA the lower expert id comes first.
// router_logits [T, E] float; topk_ids [T, k] i32; topk_weights [T, k] f32; 1 <= k <= E <= kMaxExperts.
void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize,
               Stream s = {});

// Groups the P pairs of topk_ids [T, k] i32 (ids in [0, E), checked on the host) by expert into g:
// expert_offsets [E + 1], sorted_pairs [P], pair_rows [P], active_experts [E], all i32. Within an expert the
// pairs are in increasing order on the CPU, in any order on CUDA (every row's values are independent of its
// place).
void moe_group(const MoeGroups& g, TensorView topk_ids, Stream s = {});

// Every expert's SwiGLU MLP on its rows: row r of expert e (pair p = sorted_pairs[r], token t = p / k) gets
// rows[r] = down[e] @ (silu(gate) * up) with [gate | up] = gate_up[e] @ x[t]; gate and up are rounded to
// act's dtype, then the activation (into act[r]). x [T, H]; rows [P, H]; act [P, Im]; k = P / T.
void moe_experts(TensorView rows, TensorView x, const MoeExpertWeights& w, const MoeGroups& g, TensorView act,
                 Stream s = {});

// out[t] = sum over j = 0..k-1 of topk_weights[t, j] * rows[pair_rows[t k + j]], accumulated in fp32 in that
// order. out [T, H]; rows [P, H]; topk_weights [T, k] f32; pair_rows [P] i32 (in [0, P), checked on the host).
void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows, Stream s = {});

// The whole sparse MLP of T <= ws.capacity() tokens: router_logits = x @ router_w^T, moe_route, moe_group,
// moe_experts, moe_combine. out, x [T, H] (out may be x); router_w [E, H]; k = ws.topk_ids.dim(1).
void moe_mlp(TensorView out, TensorView x, TensorView router_w, const MoeExpertWeights& experts, bool renormalize,
             const MoeWorkspace& ws, Stream s = {});

}  // namespace nanovllm::ops
