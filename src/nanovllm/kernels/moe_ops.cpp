// Mixture-of-experts op entry points: validate (on the host also the index contents), then dispatch.
#include "nanovllm/kernels/moe_ops.h"

#include <string_view>
#include <tuple>

#include "nanovllm/core/error.h"
#include "nanovllm/core/limits.h"
#include "nanovllm/kernels/cpu/cpu_moe_ops.h"
#include "nanovllm/kernels/cuda/cuda_moe_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {
namespace {

// Stacked expert weights: gate_up [E, 2 Im, H], down [E, H, Im] of one float dtype, or both F8E4M3 with their f32
// block scales (on CUDA only; H and Im multiples of 128). Returns Im.
int64_t check_expert_weights(std::string_view op, const MoeExpertWeights& w, int64_t H, Device dev) {
  const TensorView& gate_up_w = w.gate_up;
  check_tensor(op, "gate_up_w", gate_up_w, dev, 3);
  const int64_t E = gate_up_w.dim(0), Im = gate_up_w.dim(1) / 2;
  NANOVLLM_CHECK(E >= 1 && E <= kMaxExperts, op, ": gate_up_w ", gate_up_w.shape().str(), " holds ", E,
                 " experts; 1 to ", kMaxExperts, " are supported");
  NANOVLLM_CHECK(gate_up_w.dim(1) % 2 == 0 && Im > 0, op, ": gate_up_w ", gate_up_w.shape().str(),
                 " must hold an even, non-zero number of rows per expert (gate | up)");
  NANOVLLM_CHECK(gate_up_w.dim(2) == H, op, ": gate_up_w ", gate_up_w.shape().str(), " has in-features ",
                 gate_up_w.dim(2), " but the hidden size is ", H);
  check_tensor(op, "down_w", w.down, dev, 3);
  check_shape(op, "down_w", w.down, {E, H, Im});
  NANOVLLM_CHECK(w.down.dtype() == gate_up_w.dtype(), op, ": down_w is ", dtype_name(w.down.dtype()),
                 " but gate_up_w is ", dtype_name(gate_up_w.dtype()));
  if (!w.fp8()) {
    check_float(op, "gate_up_w", gate_up_w);
    NANOVLLM_CHECK(!w.gate_up_scale.defined() && !w.down_scale.defined(), op, ": block scales given with ",
                   dtype_name(gate_up_w.dtype()), " expert weights (they go with F8E4M3 codes only)");
    return Im;
  }
  NANOVLLM_CHECK(dev.is_cuda(), op, ": fp8 expert weights run on CUDA only (the CPU backend loads them dequantized)");
  NANOVLLM_CHECK(H % kFp8BlockSize == 0 && Im % kFp8BlockSize == 0, op, ": fp8 experts need the hidden size (", H,
                 ") and the intermediate size (", Im, ") in multiples of 128 (whole scale blocks)");
  for (const auto& [name, scale, shape] :
       {std::tuple{"gate_up_scale", &w.gate_up_scale, Shape{E, 2 * Im / kFp8BlockSize, H / kFp8BlockSize}},
        std::tuple{"down_scale", &w.down_scale, Shape{E, H / kFp8BlockSize, Im / kFp8BlockSize}}}) {
    check_tensor(op, name, *scale, dev, 3);
    NANOVLLM_CHECK(scale->dtype() == DType::kF32, op, ": ", name, " must be F32, got ", dtype_name(scale->dtype()));
    check_shape(op, name, *scale, shape);
  }
  return Im;
}

// g's tensors for P pairs over E experts.
void check_groups(std::string_view op, const MoeGroups& g, int64_t P, int64_t E, Device dev) {
  check_i32_tensor(op, "expert_offsets", g.expert_offsets, dev, {E + 1});
  check_i32_tensor(op, "sorted_pairs", g.sorted_pairs, dev, {P});
  check_i32_tensor(op, "pair_rows", g.pair_rows, dev, {P});
  check_i32_tensor(op, "active_experts", g.active_experts, dev, {E});
}

// On the host: g is a grouping of P pairs (offsets rising from 0 to P, sorted_pairs a permutation of
// [0, P) whose inverse is pair_rows). Kernels index with these, so a broken grouping must not reach them.
void check_host_groups(std::string_view op, const MoeGroups& g, int64_t P, int64_t E) {
  const int32_t* off = g.expert_offsets.data_as<const int32_t>();
  NANOVLLM_CHECK(off[0] == 0 && off[E] == P, op, ": expert_offsets must run from 0 to ", P, " (got ", off[0], " .. ",
                 off[E], ")");
  for (int64_t e = 0; e < E; ++e)
    NANOVLLM_CHECK(off[e] <= off[e + 1], op, ": expert_offsets decrease at expert ", e);
  const int32_t* sorted = g.sorted_pairs.data_as<const int32_t>();
  const int32_t* rows = g.pair_rows.data_as<const int32_t>();
  for (int64_t r = 0; r < P; ++r)
    NANOVLLM_CHECK(sorted[r] >= 0 && sorted[r] < P && rows[sorted[r]] == r, op, ": sorted_pairs[", r, "] = ",
                   sorted[r], " is not a pair whose pair_rows entry is ", r);
}

}  // namespace

MoeWorkspace MoeWorkspace::first(int64_t tokens) const {
  NANOVLLM_CHECK(tokens >= 0 && tokens <= capacity(), "MoeWorkspace: ", tokens, " tokens, room for ", capacity());
  const int64_t pairs = tokens * topk_ids.dim(1);
  MoeWorkspace w = *this;
  w.router_logits = router_logits.slice_rows(0, tokens);
  w.topk_ids = topk_ids.slice_rows(0, tokens);
  w.topk_weights = topk_weights.slice_rows(0, tokens);
  w.groups.sorted_pairs = groups.sorted_pairs.slice_rows(0, pairs);
  w.groups.pair_rows = groups.pair_rows.slice_rows(0, pairs);
  w.act = act.slice_rows(0, pairs);
  w.rows = rows.slice_rows(0, pairs);
  return w;
}

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize, Stream s) {
  constexpr std::string_view op = "moe_route";
  const Device dev = router_logits.device();
  check_tensor(op, "router_logits", router_logits, dev, 2);
  check_float(op, "router_logits", router_logits);
  check_tensor(op, "topk_ids", topk_ids, dev, 2);
  check_i32(op, "topk_ids", topk_ids);
  const int64_t T = router_logits.dim(0), E = router_logits.dim(1), k = topk_ids.dim(1);
  NANOVLLM_CHECK(E >= 1 && E <= kMaxExperts, op, ": router_logits ", router_logits.shape().str(), " has ", E,
                 " experts; 1 to ", kMaxExperts, " are supported");
  NANOVLLM_CHECK(k >= 1 && k <= E, op, ": topk_ids ", topk_ids.shape().str(), " asks for ", k,
                 " experts per token; 1 to ", E, " (router_logits ", router_logits.shape().str(), ")");
  check_shape(op, "topk_ids", topk_ids, {T, k});
  check_tensor(op, "topk_weights", topk_weights, dev, 2);
  NANOVLLM_CHECK(topk_weights.dtype() == DType::kF32, op, ": topk_weights must be F32, got ",
                 dtype_name(topk_weights.dtype()));
  check_shape(op, "topk_weights", topk_weights, {T, k});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(moe_route, dev, topk_ids, topk_weights, router_logits, renormalize, s);
  cpu::moe_route(topk_ids, topk_weights, router_logits, renormalize);
}

void moe_group(const MoeGroups& g, TensorView topk_ids, Stream s) {
  constexpr std::string_view op = "moe_group";
  const Device dev = topk_ids.device();
  check_tensor(op, "topk_ids", topk_ids, dev, 2);
  check_i32(op, "topk_ids", topk_ids);
  check_tensor(op, "expert_offsets", g.expert_offsets, dev, 1);
  const int64_t P = topk_ids.numel(), E = g.expert_offsets.dim(0) - 1;
  NANOVLLM_CHECK(E >= 1 && E <= kMaxExperts, op, ": expert_offsets ", g.expert_offsets.shape().str(), " is for ", E,
                 " experts; 1 to ", kMaxExperts, " are supported");
  check_groups(op, g, P, E, dev);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(moe_group, dev, g, topk_ids, s);
  const int32_t* ids = topk_ids.data_as<const int32_t>();
  for (int64_t p = 0; p < P; ++p)
    NANOVLLM_CHECK(ids[p] >= 0 && ids[p] < E, op, ": topk_ids[", p / topk_ids.dim(1), ", ", p % topk_ids.dim(1),
                   "] = ", ids[p], " is outside [0, ", E, ")");
  cpu::moe_group(g, topk_ids);
}

void moe_experts(TensorView rows, TensorView x, const MoeExpertWeights& w, const MoeGroups& g, TensorView act,
                 Stream s) {
  constexpr std::string_view op = "moe_experts";
  const Device dev = x.device();
  check_tensor(op, "x", x, dev, 2);
  check_float(op, "x", x);
  const int64_t T = x.dim(0), H = x.dim(1);
  const int64_t Im = check_expert_weights(op, w, H, dev);
  const int64_t E = w.gate_up.dim(0);
  check_tensor(op, "rows", rows, dev, 2);
  check_float(op, "rows", rows);
  const int64_t P = rows.dim(0);
  NANOVLLM_CHECK((T == 0 && P == 0) || (T > 0 && P % T == 0 && P / T >= 1 && P / T <= E), op, ": rows ",
                 rows.shape().str(), " is not k = 1..", E, " rows per token of x ", x.shape().str());
  check_shape(op, "rows", rows, {P, H});
  check_float_tensor(op, "act", act, dev, {P, Im});
  check_groups(op, g, P, E, dev);
  if (P == 0) return;
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(moe_experts, dev, rows, x, w, g, act, s);
  check_host_groups(op, g, P, E);
  cpu::moe_experts(rows, x, w.gate_up, w.down, g, act);
}

void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows, Stream s) {
  constexpr std::string_view op = "moe_combine";
  const Device dev = rows.device();
  check_tensor(op, "out", out, dev, 2);
  check_float(op, "out", out);
  const int64_t T = out.dim(0), H = out.dim(1);
  check_tensor(op, "topk_weights", topk_weights, dev, 2);
  NANOVLLM_CHECK(topk_weights.dtype() == DType::kF32, op, ": topk_weights must be F32, got ",
                 dtype_name(topk_weights.dtype()));
  NANOVLLM_CHECK(topk_weights.dim(0) == T && topk_weights.dim(1) >= 1, op, ": topk_weights ",
                 topk_weights.shape().str(), " must have a row of k >= 1 weights per token of out ", out.shape().str());
  const int64_t P = T * topk_weights.dim(1);
  check_float_tensor(op, "rows", rows, dev, {P, H});
  check_i32_tensor(op, "pair_rows", pair_rows, dev, {P});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(moe_combine, dev, out, rows, topk_weights, pair_rows, s);
  const int32_t* r = pair_rows.data_as<const int32_t>();
  for (int64_t p = 0; p < P; ++p)
    NANOVLLM_CHECK(r[p] >= 0 && r[p] < P, op, ": pair_rows[", p, "] = ", r[p], " is outside [0, ", P, ")");
  cpu::moe_combine(out, rows, topk_weights, pair_rows);
}

void moe_mlp(TensorView out, TensorView x, TensorView router_w, const MoeExpertWeights& experts, bool renormalize,
             const MoeWorkspace& ws, Stream s) {
  constexpr std::string_view op = "moe_mlp";
  const Device dev = x.device();
  check_tensor(op, "x", x, dev, 2);
  check_float(op, "x", x);
  const int64_t T = x.dim(0), H = x.dim(1);
  check_float_tensor(op, "out", out, dev, {T, H});
  check_expert_weights(op, experts, H, dev);
  check_float_tensor(op, "router_w", router_w, dev, {experts.gate_up.dim(0), H});
  NANOVLLM_CHECK(T <= ws.capacity(), op, ": ", T, " tokens, the workspace has room for ", ws.capacity());
  if (T == 0) return;
  // The workspace's views for T tokens: the CUDA path runs its kernels straight on them.
  const MoeWorkspace w = ws.first(T);
  const int64_t E = experts.gate_up.dim(0), Im = experts.gate_up.dim(1) / 2, k = w.topk_ids.dim(1), P = T * k;
  NANOVLLM_CHECK(k >= 1 && k <= E, op, ": the workspace routes to ", k, " experts per token; 1 to ", E);
  check_float_tensor(op, "ws.router_logits", w.router_logits, dev, {T, E});
  check_i32_tensor(op, "ws.topk_ids", w.topk_ids, dev, {T, k});
  check_tensor(op, "ws.topk_weights", w.topk_weights, dev, 2);
  NANOVLLM_CHECK(w.topk_weights.dtype() == DType::kF32, op, ": ws.topk_weights must be F32");
  check_shape(op, "ws.topk_weights", w.topk_weights, {T, k});
  check_groups(op, w.groups, P, E, dev);
  check_float_tensor(op, "ws.act", w.act, dev, {P, Im});
  check_float_tensor(op, "ws.rows", w.rows, dev, {P, H});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(moe_mlp, dev, out, x, router_w, experts, renormalize, ws, s);
  linear(w.router_logits, x, router_w, TensorView(), s);  // [T, E]
  moe_route(w.topk_ids, w.topk_weights, w.router_logits, renormalize, s);
  moe_group(w.groups, w.topk_ids, s);
  moe_experts(w.rows, x, experts, w.groups, w.act, s);  // [P, H]
  moe_combine(out, w.rows, w.topk_weights, w.groups.pair_rows, s);
}

}  // namespace nanovllm::ops
