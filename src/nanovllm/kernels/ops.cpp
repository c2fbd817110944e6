// Op entry points: validate shapes, dtypes, devices (and, for host-resident tensors, index ranges),
// then dispatch on the device to kernels/cpu or kernels/cuda.
#include "nanovllm/kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string_view>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {
namespace {

// The RMSNorm ops: x [T, H] float, `other` (out or residual) float of x's shape, weight [H], eps >= 0.
void check_norm(std::string_view op, const TensorView& x, std::string_view other_name, const TensorView& other,
                const TensorView& weight, float eps, Device dev) {
  check_tensor(op, "x", x, dev, 2);
  check_float(op, "x", x);
  check_float_tensor(op, other_name, other, dev, x.shape());
  check_float_tensor(op, "weight", weight, dev, {x.dim(1)});
  NANOVLLM_CHECK(eps >= 0.0f && std::isfinite(eps), op, ": eps must be finite and >= 0, got ", eps);
}

// Host-resident row indices into a tensor of `n` rows.
void check_host_rows(std::string_view op, const TensorView& rows, int64_t n) {
  const int32_t* r = rows.data_as<const int32_t>();
  for (int64_t i = 0; i < rows.dim(0); ++i)
    NANOVLLM_CHECK(r[i] >= 0 && r[i] < n, op, ": rows[", i, "] = ", r[i], " is outside [0, ", n, ")");
}

}  // namespace


void embedding(TensorView out, TensorView ids, TensorView table, Stream s) {
  constexpr std::string_view op = "embedding";
  const Device dev = out.device();
  check_tensor(op, "out", out, dev, 2);
  check_float(op, "out", out);
  check_tensor(op, "table", table, dev, 2);
  check_float(op, "table", table);
  check_tensor(op, "ids", ids, dev, 1);
  check_i32(op, "ids", ids);
  const int64_t T = out.dim(0), H = out.dim(1), V = table.dim(0);
  check_shape(op, "ids", ids, {T});
  NANOVLLM_CHECK(table.dim(1) == H, op, ": table ", table.shape().str(), " has hidden size ", table.dim(1),
                 " but out ", out.shape().str(), " has ", H);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(embedding, dev, out, ids, table, s);
  const int32_t* id = ids.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    NANOVLLM_CHECK(id[t] >= 0 && id[t] < V, op, ": ids[", t, "] = ", id[t], " is outside the vocabulary [0, ",
                   V, ")");
  cpu::embedding(out, ids, table);
}

void embedding_vocab_shard(TensorView out, TensorView ids, TensorView table, int64_t vocab_begin, Stream s) {
  constexpr std::string_view op = "embedding_vocab_shard";
  const Device dev = out.device();
  check_tensor(op, "out", out, dev, 2);
  check_float(op, "out", out);
  check_tensor(op, "table", table, dev, 2);
  check_float(op, "table", table);
  check_tensor(op, "ids", ids, dev, 1);
  check_i32(op, "ids", ids);
  check_shape(op, "ids", ids, {out.dim(0)});
  NANOVLLM_CHECK(table.dim(1) == out.dim(1), op, ": table ", table.shape().str(), " has hidden size ", table.dim(1),
                 " but out ", out.shape().str(), " has ", out.dim(1));
  NANOVLLM_CHECK(vocab_begin >= 0, op, ": vocab_begin ", vocab_begin, " is negative");
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(embedding_vocab_shard, dev, out, ids, table, vocab_begin, s);
  cpu::embedding(out, ids, table, vocab_begin);
}

void gather_vocab_shards(TensorView out, TensorView shards, Stream s) {
  constexpr std::string_view op = "gather_vocab_shards";
  const Device dev = out.device();
  check_tensor(op, "out", out, dev, 2);
  check_tensor(op, "shards", shards, dev, 3);
  NANOVLLM_CHECK(out.dtype() == DType::kF32 && shards.dtype() == DType::kF32, op, ": out and shards must be f32, got ",
                 dtype_name(out.dtype()), " and ", dtype_name(shards.dtype()));
  const int64_t n = shards.dim(0), rows = shards.dim(1), per_rank = shards.dim(2), vocab = out.dim(1);
  NANOVLLM_CHECK(rows == out.dim(0), op, ": shards ", shards.shape().str(), " have ", rows, " rows, out ",
                 out.shape().str(), " has ", out.dim(0));
  NANOVLLM_CHECK(n >= 1 && per_rank == (vocab + n - 1) / n, op, ": ", n, " shards of ", per_rank,
                 " columns; a vocabulary of ", vocab, " needs ceil(V / N) = ", (vocab + n - 1) / std::max<int64_t>(n, 1));
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(gather_vocab_shards, dev, out, shards, s);
  cpu::gather_vocab_shards(out, shards);
}

void rms_norm(TensorView out, TensorView x, TensorView weight, float eps, Stream s) {
  constexpr std::string_view op = "rms_norm";
  const Device dev = x.device();
  check_norm(op, x, "out", out, weight, eps, dev);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(rms_norm, dev, out, x, weight, eps, s);
  cpu::rms_norm(out, x, weight, eps);
}

void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, Stream s) {
  constexpr std::string_view op = "add_rms_norm";
  const Device dev = x.device();
  check_norm(op, x, "residual", residual, weight, eps, dev);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(add_rms_norm, dev, x, residual, weight, eps, s);
  cpu::add_rms_norm(x, residual, weight, eps);
}

void copy_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, Stream s) {
  constexpr std::string_view op = "copy_rms_norm";
  const Device dev = x.device();
  check_norm(op, x, "residual", residual, weight, eps, dev);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(copy_rms_norm, dev, x, residual, weight, eps, s);
  cpu::copy_rms_norm(x, residual, weight, eps);
}

void gather_add_rms_norm(TensorView out, TensorView out_residual, TensorView x, TensorView residual, TensorView rows,
                         TensorView weight, float eps, Stream s) {
  constexpr std::string_view op = "gather_add_rms_norm";
  const Device dev = x.device();
  check_norm(op, x, "residual", residual, weight, eps, dev);
  check_tensor(op, "rows", rows, dev, 1);
  check_i32(op, "rows", rows);
  check_float_tensor(op, "out", out, dev, {rows.dim(0), x.dim(1)});
  check_float_tensor(op, "out_residual", out_residual, dev, {rows.dim(0), x.dim(1)});
  NANOVLLM_CHECK(out_residual.dtype() == residual.dtype(), op, ": out_residual is ", dtype_name(out_residual.dtype()),
                 " but residual is ", dtype_name(residual.dtype()));
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(gather_add_rms_norm, dev, out, out_residual, x, residual, rows, weight, eps, s);
  check_host_rows(op, rows, x.dim(0));
  cpu::gather_add_rms_norm(out, out_residual, x, residual, rows, weight, eps);
}

void linear(TensorView out, TensorView in, TensorView weight, TensorView bias, Stream s, LinearHint hint) {
  constexpr std::string_view op = "linear";
  const Device dev = in.device();
  check_tensor(op, "in", in, dev, 2);
  check_float(op, "in", in);
  check_tensor(op, "weight", weight, dev, 2);
  check_float(op, "weight", weight);
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  NANOVLLM_CHECK(weight.dim(1) == K, op, ": weight ", weight.shape().str(), " has in-features ", weight.dim(1),
                 " but in ", in.shape().str(), " has ", K);
  check_float_tensor(op, "out", out, dev, {T, N});
  if (bias.defined()) check_float_tensor(op, "bias", bias, dev, {N});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(linear, dev, out, in, weight, bias, s, hint);
  static_cast<void>(hint);  // the CPU backend runs one op at a time
  cpu::linear(out, in, weight, bias);
}

namespace {

// in [T, K] float, weight [N, K] F8E4M3 with N and K multiples of 128, weight_scale [N / 128, K / 128] F32.
void check_fp8_projection(std::string_view op, TensorView in, TensorView weight, TensorView weight_scale, Device dev) {
  check_tensor(op, "in", in, dev, 2);
  check_float(op, "in", in);
  check_tensor(op, "weight", weight, dev, 2);
  NANOVLLM_CHECK(weight.dtype() == DType::kF8E4M3, op, ": weight is ", dtype_name(weight.dtype()), ", expected F8_E4M3");
  const int64_t K = in.dim(1), N = weight.dim(0);
  NANOVLLM_CHECK(weight.dim(1) == K, op, ": weight ", weight.shape().str(), " has in-features ", weight.dim(1),
                 " but in ", in.shape().str(), " has ", K);
  NANOVLLM_CHECK(N % kFp8BlockSize == 0 && K % kFp8BlockSize == 0, op, ": weight ", weight.shape().str(),
                 ": block-scaled fp8 needs out- and in-features in multiples of 128");
  check_tensor(op, "weight_scale", weight_scale, dev, 2);
  NANOVLLM_CHECK(weight_scale.dtype() == DType::kF32, op, ": weight_scale is ", dtype_name(weight_scale.dtype()),
                 ", expected F32");
  check_shape(op, "weight_scale", weight_scale, {N / kFp8BlockSize, K / kFp8BlockSize});
}

}  // namespace

void linear_fp8(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias, Stream s) {
  constexpr std::string_view op = "linear_fp8";
  const Device dev = in.device();
  check_fp8_projection(op, in, weight, weight_scale, dev);
  const int64_t T = in.dim(0), N = weight.dim(0);
  check_float_tensor(op, "out", out, dev, {T, N});
  if (bias.defined()) check_float_tensor(op, "bias", bias, dev, {N});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(linear_fp8, dev, out, in, weight, weight_scale, bias, s);
  cpu::linear_fp8(out, in, weight, weight_scale, bias);
}

void linear_fp8_silu(TensorView act, TensorView in, TensorView weight, TensorView weight_scale, TensorView gate_up,
                     Stream s) {
  constexpr std::string_view op = "linear_fp8_silu";
  const Device dev = in.device();
  check_fp8_projection(op, in, weight, weight_scale, dev);
  const int64_t T = in.dim(0), N = weight.dim(0);
  NANOVLLM_CHECK(N % (2 * kFp8BlockSize) == 0, op, ": weight ", weight.shape().str(),
                 " must hold gate and up rows in whole 128-row blocks each (out-features a multiple of 256)");
  check_float_tensor(op, "gate_up", gate_up, dev, {T, N});
  check_float_tensor(op, "act", act, dev, {T, N / 2});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(linear_fp8_silu, dev, act, in, weight, weight_scale, gate_up, s);
  cpu::linear_fp8(gate_up, in, weight, weight_scale, TensorView());
  cpu::silu_mul(act, gate_up);
}

void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const RopeParams& rope, const KvCacheTensor& k_cache,
                  const KvCacheTensor& v_cache, const AttentionMetadata& meta, Stream s) {
  constexpr std::string_view op = "qkv_prologue";
  const Device dev = q_out.device();
  check_qkv_prologue(op, q_out, qkv, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, meta);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(qkv_prologue, dev, q_out, qkv, q_norm, k_norm, eps, positions, rope, k_cache, v_cache,
                           meta, s);
  const int64_t T = q_out.dim(0);
  const int32_t* pos = positions.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    NANOVLLM_CHECK(pos[t] >= 0, op, ": positions[", t, "] = ", pos[t], " is negative");
  cpu::qkv_prologue(q_out, qkv, q_norm, k_norm, eps, positions, rope.inv_freq.data_as<const float>(),
                    rope.attention_scaling, k_cache, v_cache, meta, rope.inv_freq.numel(), rope.interleaved);
}

void paged_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                     const AttentionMetadata& meta, float scale, Stream s) {
  constexpr std::string_view op = "paged_attention";
  const Device dev = q.device();
  check_paged_attention(op, out, q, k_cache, v_cache, meta, scale);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(paged_attention, dev, out, q, k_cache, v_cache, meta, scale, s);
  cpu::paged_attention(out, q, k_cache, v_cache, meta, scale);
}

void qkv_prologue_attention(TensorView out, TensorView q, TensorView qkv, TensorView q_norm, TensorView k_norm,
                            float eps, TensorView positions, const RopeParams& rope, const KvCacheTensor& k_cache,
                            const KvCacheTensor& v_cache, const AttentionMetadata& meta, float scale, Stream s) {
  constexpr std::string_view op = "qkv_prologue_attention";
  const Device dev = q.device();
  if (dev.is_cuda()) {
    check_qkv_prologue(op, q, qkv, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, meta);
    check_paged_attention(op, out, q, k_cache, v_cache, meta, scale);
    NANOVLLM_DISPATCH_CUDA(qkv_prologue_attention, dev, out, q, qkv, q_norm, k_norm, eps, positions, rope, k_cache,
                           v_cache, meta, scale, s);
  }
  qkv_prologue(q, qkv, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, meta, s);
  paged_attention(out, q, k_cache, v_cache, meta, scale, s);
}

void silu_mul(TensorView out, TensorView gate_up, Stream s) {
  constexpr std::string_view op = "silu_mul";
  const Device dev = gate_up.device();
  check_tensor(op, "gate_up", gate_up, dev, 2);
  check_float(op, "gate_up", gate_up);
  NANOVLLM_CHECK(gate_up.dim(1) % 2 == 0, op, ": gate_up ", gate_up.shape().str(), " has an odd width");
  check_float_tensor(op, "out", out, dev, {gate_up.dim(0), gate_up.dim(1) / 2});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(silu_mul, dev, out, gate_up, s);
  cpu::silu_mul(out, gate_up);
}

void linear_silu_mul(TensorView out, TensorView gate_up, TensorView weight, TensorView act, Stream s) {
  constexpr std::string_view op = "linear_silu_mul";
  const Device dev = gate_up.device();
  check_tensor(op, "gate_up", gate_up, dev, 2);
  check_float(op, "gate_up", gate_up);
  NANOVLLM_CHECK(gate_up.dim(1) % 2 == 0, op, ": gate_up ", gate_up.shape().str(), " has an odd width");
  const int64_t T = gate_up.dim(0), I = gate_up.dim(1) / 2;
  check_tensor(op, "weight", weight, dev, 2);
  check_float(op, "weight", weight);
  NANOVLLM_CHECK(weight.dim(1) == I, op, ": weight ", weight.shape().str(), " has in-features ", weight.dim(1),
                 " but gate_up ", gate_up.shape().str(), " holds ", I);
  check_float_tensor(op, "out", out, dev, {T, weight.dim(0)});
  check_float_tensor(op, "act", act, dev, {T, I});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(linear_silu_mul, dev, out, gate_up, weight, act, s);
  cpu::silu_mul(act, gate_up);
  cpu::linear(out, act, weight, TensorView());
}

void silu_mlp(TensorView out, TensorView x, TensorView gate_up_w, TensorView down_w, TensorView gate_up,
              TensorView act, Stream s) {
  constexpr std::string_view op = "silu_mlp";
  const Device dev = x.device();
  check_tensor(op, "x", x, dev, 2);
  check_float(op, "x", x);
  check_tensor(op, "gate_up_w", gate_up_w, dev, 2);
  check_float(op, "gate_up_w", gate_up_w);
  check_tensor(op, "down_w", down_w, dev, 2);
  check_float(op, "down_w", down_w);
  const int64_t T = x.dim(0), K = x.dim(1), I = gate_up_w.dim(0) / 2, N = down_w.dim(0);
  NANOVLLM_CHECK(gate_up_w.dim(1) == K, op, ": gate_up_w ", gate_up_w.shape().str(), " has in-features ",
                 gate_up_w.dim(1), " but x ", x.shape().str(), " has ", K);
  NANOVLLM_CHECK(gate_up_w.dim(0) % 2 == 0, op, ": gate_up_w ", gate_up_w.shape().str(),
                 " has an odd number of rows (gate | up)");
  NANOVLLM_CHECK(down_w.dim(1) == I, op, ": down_w ", down_w.shape().str(), " has in-features ", down_w.dim(1),
                 " but gate_up_w ", gate_up_w.shape().str(), " makes ", I);
  check_float_tensor(op, "out", out, dev, {T, N});
  check_float_tensor(op, "gate_up", gate_up, dev, {T, 2 * I});
  check_float_tensor(op, "act", act, dev, {T, I});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(silu_mlp, dev, out, x, gate_up_w, down_w, gate_up, act, s);
  cpu::linear(gate_up, x, gate_up_w, TensorView());
  cpu::silu_mul(act, gate_up);
  cpu::linear(out, act, down_w, TensorView());
}

void gather_rows(TensorView out, TensorView in, TensorView rows, Stream s) {
  constexpr std::string_view op = "gather_rows";
  const Device dev = in.device();
  check_tensor(op, "in", in, dev, 2);
  check_tensor(op, "rows", rows, dev, 1);
  check_i32(op, "rows", rows);
  check_tensor(op, "out", out, dev, 2);
  check_shape(op, "out", out, {rows.dim(0), in.dim(1)});
  NANOVLLM_CHECK(out.dtype() == in.dtype(), op, ": out is ", dtype_name(out.dtype()), " but in is ",
                 dtype_name(in.dtype()));
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(gather_rows, dev, out, in, rows, s);
  check_host_rows(op, rows, in.dim(0));
  cpu::gather_rows(out, in, rows);
}

void gather_kv_rows(TensorView out, const KvCacheTensor& cache, TensorView slots, Stream s) {
  constexpr std::string_view op = "gather_kv_rows";
  const Device dev = cache.device();
  check_kv_tensor(op, "cache", cache, dev, 4);
  check_tensor(op, "slots", slots, dev, 1);
  check_i32(op, "slots", slots);
  check_float_tensor(op, "out", out, dev, {slots.dim(0), cache.dim(2), cache.dim(3)});
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(gather_kv_rows, dev, out, cache, slots, s);
  check_host_rows(op, slots, cache.dim(0) * cache.dim(1));
  cpu::gather_kv_rows(out, cache, slots);
}

void convert(TensorView out, TensorView x, Stream s) {
  constexpr std::string_view op = "convert";
  const Device dev = x.device();
  NANOVLLM_CHECK(x.defined() && out.defined(), op, ": undefined tensor");
  check_tensor(op, "x", x, dev, x.ndim());
  check_float(op, "x", x);
  check_float_tensor(op, "out", out, dev, x.shape());
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(convert, dev, out, x, s);
  cpu::convert(out, x);
}

}  // namespace nanovllm::ops
