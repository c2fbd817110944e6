#include "nanovllm/kernels/op_checks.h"

#include <cmath>
#include <string>

namespace nanovllm::ops {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

void check_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, int ndim) {
  NANOVLLM_CHECK(t.defined(), op, ": ", name, " is undefined");
  NANOVLLM_CHECK(t.device() == dev, op, ": ", name, " is on ", to_string(t.device()), " but the op runs on ",
                 to_string(dev), " (all tensors of an op must be on one device)");
  NANOVLLM_CHECK(t.ndim() == ndim, op, ": ", name, " must have rank ", ndim, ", got shape ", t.shape().str());
}

void check_float(std::string_view op, std::string_view name, const TensorView& t) {
  NANOVLLM_CHECK(is_float(t.dtype()), op, ": ", name, " must be F32, BF16 or F16, got ", dtype_name(t.dtype()));
}

void check_i32(std::string_view op, std::string_view name, const TensorView& t) {
  NANOVLLM_CHECK(t.dtype() == DType::kI32, op, ": ", name, " must be I32, got ", dtype_name(t.dtype()));
}

void check_shape(std::string_view op, std::string_view name, const TensorView& t, Shape expected) {
  NANOVLLM_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
                 expected.str());
}

void check_float_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, Shape shape) {
  check_tensor(op, name, t, dev, shape.ndim);
  check_float(op, name, t);
  check_shape(op, name, t, shape);
}

void check_i32_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, Shape shape) {
  check_tensor(op, name, t, dev, shape.ndim);
  check_i32(op, name, t);
  check_shape(op, name, t, shape);
}

void check_kv_tensor(std::string_view op, std::string_view name, const KvCacheTensor& cache, Device dev, int ndim) {
  check_tensor(op, name, cache, dev, ndim);
  if (!cache.fp8()) {
    check_float(op, name, cache);
    NANOVLLM_CHECK(!cache.scale.defined(), op, ": ", name, " is ",
                   dtype_name(cache.dtype()), " and has scales (only an F8_E4M3 cache has them)");
    return;
  }
  NANOVLLM_CHECK(cache.scale.defined(), op, ": ", name,
                 " is F8_E4M3 but has no scales (kv_cache.h: one f32 per row)");
  Shape rows = cache.shape();
  rows.ndim -= 1;
  check_tensor(op, std::string(name) + ".scale", cache.scale, dev, ndim - 1);
  NANOVLLM_CHECK(cache.scale.dtype() == DType::kF32, op, ": ", name, ".scale must be F32, got ",
                 dtype_name(cache.scale.dtype()));
  check_shape(op, std::string(name) + ".scale", cache.scale, rows);
}

void check_kv_pair(std::string_view op, const KvCacheTensor& k, const KvCacheTensor& v, Device dev, int ndim,
                   std::string_view k_name, std::string_view v_name) {
  check_kv_tensor(op, k_name, k, dev, ndim);
  check_kv_tensor(op, v_name, v, dev, ndim);
  check_shape(op, v_name, v, k.shape());
  NANOVLLM_CHECK(v.dtype() == k.dtype(), op, ": ", k_name, " is ", dtype_name(k.dtype()), " but ", v_name, " is ",
                 dtype_name(v.dtype()));
}

// Paged KV cache [NB, BS, Hk, D] pair.
void check_kv_cache(std::string_view op, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache, Device dev,
                    const AttentionMetadata& meta) {
  check_kv_pair(op, k_cache, v_cache, dev, 4);
  NANOVLLM_CHECK(k_cache.dim(1) > 0 && k_cache.dim(2) > 0 && k_cache.dim(3) > 0, op,
                 ": empty KV cache dimension in ", k_cache.shape().str());
  NANOVLLM_CHECK(meta.block_size == k_cache.dim(1), op, ": meta.block_size ", meta.block_size,
                 " != KV cache block size ", k_cache.dim(1), " (k_cache ", k_cache.shape().str(), ")");
}

// cu_seqlens_q [S+1], context_lens [S], block_tables [S, MB]; on the host also their contents.
void check_seq_metadata(std::string_view op, const AttentionMetadata& meta, int64_t T, int64_t num_blocks,
                        int64_t BS, Device dev) {
  const int64_t S = meta.num_seqs;
  NANOVLLM_CHECK(S >= 0, op, ": meta.num_seqs is negative");
  NANOVLLM_CHECK(meta.num_tokens == T, op, ": meta.num_tokens ", meta.num_tokens, " != ", T, " query rows");
  check_tensor(op, "meta.cu_seqlens_q", meta.cu_seqlens_q, dev, 1);
  check_i32(op, "meta.cu_seqlens_q", meta.cu_seqlens_q);
  check_shape(op, "meta.cu_seqlens_q", meta.cu_seqlens_q, {S + 1});
  check_tensor(op, "meta.context_lens", meta.context_lens, dev, 1);
  check_i32(op, "meta.context_lens", meta.context_lens);
  check_shape(op, "meta.context_lens", meta.context_lens, {S});
  check_tensor(op, "meta.block_tables", meta.block_tables, dev, 2);
  check_i32(op, "meta.block_tables", meta.block_tables);
  NANOVLLM_CHECK(meta.block_tables.dim(0) == S, op, ": meta.block_tables has ", meta.block_tables.dim(0),
                 " rows for ", S, " sequences");
  NANOVLLM_CHECK(meta.num_leading_decodes >= 0 && meta.num_leading_decodes <= S, op,
                 ": meta.num_leading_decodes ", meta.num_leading_decodes, " is outside [0, ", S, "]");
  if (!dev.is_cpu()) return;
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();
  const int32_t* bt = meta.block_tables.data_as<const int32_t>();
  const int64_t MB = meta.block_tables.dim(1);
  NANOVLLM_CHECK(S == 0 || cu[0] == 0, op, ": meta.cu_seqlens_q[0] = ", cu[0], ", expected 0");
  NANOVLLM_CHECK(cu[S] == T, op, ": meta.cu_seqlens_q[", S, "] = ", cu[S], " != ", T, " query rows");
  for (int64_t s = 0; s < S; ++s) {
    const int64_t qlen = int64_t{cu[s + 1]} - cu[s];
    NANOVLLM_CHECK(qlen >= 0, op, ": meta.cu_seqlens_q decreases at sequence ", s);
    NANOVLLM_CHECK(s >= meta.num_leading_decodes || qlen == 1, op, ": sequence ", s, " has ", qlen,
                   " query tokens but is one of meta.num_leading_decodes = ", meta.num_leading_decodes);
    if (qlen == 0) continue;
    NANOVLLM_CHECK(ctx[s] >= qlen, op, ": sequence ", s, " has context_lens ", ctx[s], " < its ", qlen,
                   " query tokens");
    const int64_t blocks = (int64_t{ctx[s]} + BS - 1) / BS;
    NANOVLLM_CHECK(blocks <= MB, op, ": sequence ", s, " needs ", blocks, " blocks for context ", ctx[s],
                   " but meta.block_tables has ", MB, " columns");
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t id = bt[s * MB + b];
      NANOVLLM_CHECK(id >= 0 && id < num_blocks, op, ": meta.block_tables[", s, "][", b, "] = ", id,
                     " is outside [0, ", num_blocks, ")");
    }
  }
}

// slot_mapping [T] I32 in [-1, NB * BS) (range checked on the host only).
void check_slot_mapping(std::string_view op, const AttentionMetadata& meta, int64_t T, int64_t num_slots,
                        Device dev) {
  NANOVLLM_CHECK(meta.num_tokens == T, op, ": meta.num_tokens ", meta.num_tokens, " != ", T, " tokens");
  check_tensor(op, "meta.slot_mapping", meta.slot_mapping, dev, 1);
  check_i32(op, "meta.slot_mapping", meta.slot_mapping);
  check_shape(op, "meta.slot_mapping", meta.slot_mapping, {T});
  if (!dev.is_cpu()) return;
  const int32_t* sm = meta.slot_mapping.data_as<const int32_t>();
  for (int64_t t = 0; t < T; ++t)
    NANOVLLM_CHECK(sm[t] >= -1 && sm[t] < num_slots, op, ": meta.slot_mapping[", t, "] = ", sm[t],
                   " is outside [-1, ", num_slots, ")");
}

void check_qkv_prologue(std::string_view op, TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm,
                        float eps, TensorView positions, const RopeParams& rope, const KvCacheTensor& k_cache,
                        const KvCacheTensor& v_cache, const AttentionMetadata& meta) {
  const Device dev = q_out.device();
  check_tensor(op, "q_out", q_out, dev, 3);
  check_float(op, "q_out", q_out);
  check_kv_cache(op, k_cache, v_cache, dev, meta);
  const int64_t T = q_out.dim(0), Hq = q_out.dim(1), D = q_out.dim(2);
  const int64_t NB = k_cache.dim(0), BS = k_cache.dim(1), Hk = k_cache.dim(2);
  NANOVLLM_CHECK(D > 0 && D % 2 == 0, op, ": head_dim ", D, " must be even and > 0 for RoPE");
  NANOVLLM_CHECK(k_cache.dim(3) == D, op, ": k_cache ", k_cache.shape().str(), " head_dim != q_out head_dim ", D);
  NANOVLLM_CHECK(Hq > 0 && Hq % Hk == 0, op, ": query heads ", Hq, " must be a multiple of KV heads ", Hk);
  check_float_tensor(op, "qkv", qkv, dev, {T, (Hq + 2 * Hk) * D});
  if (q_norm.defined()) check_float_tensor(op, "q_norm", q_norm, dev, {D});
  if (k_norm.defined()) check_float_tensor(op, "k_norm", k_norm, dev, {D});
  NANOVLLM_CHECK(eps >= 0.0f && std::isfinite(eps), op, ": eps must be finite and >= 0, got ", eps);
  check_tensor(op, "positions", positions, dev, 1);
  check_i32(op, "positions", positions);
  check_shape(op, "positions", positions, {T});
  check_tensor(op, "rope.inv_freq", rope.inv_freq, dev, 1);
  NANOVLLM_CHECK(rope.inv_freq.dtype() == DType::kF32, op, ": rope.inv_freq must be F32, got ",
                 dtype_name(rope.inv_freq.dtype()));
  const int64_t pairs = rope.inv_freq.numel();
  if (rope.interleaved) {
    NANOVLLM_CHECK(pairs > 0 && 2 * pairs <= D, op, ": rope.inv_freq ", rope.inv_freq.shape().str(),
                   " must hold 1 to head_dim / 2 = ", D / 2, " frequencies");
  } else {
    check_shape(op, "rope.inv_freq", rope.inv_freq, {D / 2});  // rotate_half: the whole head
  }
  check_slot_mapping(op, meta, T, NB * BS, dev);
}


void check_paged_attention(std::string_view op, TensorView out, TensorView q, const KvCacheTensor& k_cache,
                           const KvCacheTensor& v_cache, const AttentionMetadata& meta, float scale) {
  const Device dev = q.device();
  check_tensor(op, "q", q, dev, 3);
  check_float(op, "q", q);
  check_float_tensor(op, "out", out, dev, q.shape());
  check_kv_cache(op, k_cache, v_cache, dev, meta);
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t NB = k_cache.dim(0), BS = k_cache.dim(1), Hk = k_cache.dim(2);
  NANOVLLM_CHECK(D > 0 && k_cache.dim(3) == D, op, ": k_cache ", k_cache.shape().str(),
                 " head_dim != q head_dim ", D);
  NANOVLLM_CHECK(Hq > 0 && Hq % Hk == 0, op, ": query heads ", Hq, " must be a multiple of KV heads ", Hk);
  NANOVLLM_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  check_seq_metadata(op, meta, T, NB, BS, dev);
}

#if !NANOVLLM_WITH_CUDA
[[noreturn]] void no_cuda(std::string_view op, Device dev) {
  NANOVLLM_FAIL(op, ": tensors are on ", to_string(dev),
                " but nano-vLLM was built without CUDA (configure with -DNANOVLLM_CUDA=ON)");
}
#endif

}  // namespace nanovllm::ops
