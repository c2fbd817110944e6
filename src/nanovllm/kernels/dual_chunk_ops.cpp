// Dual Chunk Attention op entry points: validate (on the host also positions and lengths), then dispatch.
#include "nanovllm/kernels/dual_chunk_ops.h"

#include <string_view>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cpu/cpu_dual_chunk_ops.h"
#include "nanovllm/kernels/cuda/cuda_dual_chunk_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {
namespace {

void check_params(std::string_view op, const DualChunkParams& dca) {
  NANOVLLM_CHECK(dca.chunk_len > 0 && dca.chunk_size >= dca.chunk_len && dca.chunk_size <= (int64_t{1} << 30), op,
                 ": chunk_len ", dca.chunk_len, " and chunk_size ", dca.chunk_size,
                 " must satisfy 0 < chunk_len <= chunk_size <= 2^30");
  NANOVLLM_CHECK(dca.original_max_position_embeddings >= 0, op, ": original_max_position_embeddings ",
                 dca.original_max_position_embeddings, " is negative");
}

// The [3, T, Hq, D] queries; returns the first rotation's [T, Hq, D] view.
TensorView check_queries(std::string_view op, const TensorView& q, Device dev) {
  check_tensor(op, "q", q, dev, 4);
  check_float(op, "q", q);
  NANOVLLM_CHECK(q.dim(0) == 3, op, ": q ", q.shape().str(), " must be [3, T, Hq, D] (intra, successive, inter)");
  return TensorView(q.data(), q.dtype(), Shape{q.dim(1), q.dim(2), q.dim(3)}, dev);
}

// meta.dca_scale_lens [T] i32 when the params scale; on the host every length >= 1.
void check_scale_lens(std::string_view op, const DualChunkParams& dca, const AttentionMetadata& meta, int64_t T,
                      Device dev) {
  if (!dca.scales()) return;
  check_i32_tensor(op, "meta.dca_scale_lens", meta.dca_scale_lens, dev, {T});
  if (!dev.is_cpu()) return;
  const int32_t* n = meta.dca_scale_lens.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    NANOVLLM_CHECK(n[t] >= 1, op, ": meta.dca_scale_lens[", t, "] = ", n[t], " (a length is >= 1)");
}

}  // namespace

void dual_chunk_qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                             TensorView positions, const RopeParams& rope, const DualChunkParams& dca,
                             TensorView k_cache, TensorView v_cache, const AttentionMetadata& meta, Stream s) {
  constexpr std::string_view op = "dual_chunk_qkv_prologue";
  const Device dev = q_out.device();
  const TensorView q0 = check_queries(op, q_out, dev);
  check_qkv_prologue(op, q0, qkv, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, meta);
  NANOVLLM_CHECK(!rope.interleaved, op, ": Dual Chunk Attention rotates whole heads (rotate_half), not interleaved pairs");
  check_params(op, dca);
  const int64_t T = q0.dim(0);
  check_scale_lens(op, dca, meta, T, dev);
  if (dev.is_cuda())
    NANOVLLM_DISPATCH_CUDA(dual_chunk_qkv_prologue, dev, q_out, qkv, q_norm, k_norm, eps, positions, rope, dca,
                           k_cache, v_cache, meta, s);
  const int32_t* pos = positions.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t) NANOVLLM_CHECK(pos[t] >= 0, op, ": positions[", t, "] = ", pos[t], " is negative");
  cpu::dual_chunk_qkv_prologue(q_out, qkv, q_norm, k_norm, eps, positions, rope.inv_freq.data_as<const float>(),
                               rope.attention_scaling, dca, k_cache, v_cache, meta);
}

void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const DualChunkParams& dca, float scale, Stream s) {
  constexpr std::string_view op = "dual_chunk_attention";
  const Device dev = q.device();
  const TensorView q0 = check_queries(op, q, dev);
  check_paged_attention(op, out, q0, k_cache, v_cache, meta, scale);
  check_params(op, dca);
  if (dev.is_cuda()) NANOVLLM_DISPATCH_CUDA(dual_chunk_attention, dev, out, q, k_cache, v_cache, meta, dca, scale, s);
  cpu::dual_chunk_attention(out, q, k_cache, v_cache, meta, dca, scale);
}

}  // namespace nanovllm::ops
