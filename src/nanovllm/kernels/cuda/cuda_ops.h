// CUDA op entry points called by ops.cpp after validation (declarations only; kernels/cuda implements
// them). Same contracts as ops.h; all tensors are on one CUDA device, `s.cuda_stream` is the
// cudaStream_t to launch on. Only compiled in when the CUDA backend is built (NANOVLLM_WITH_CUDA).
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/ops.h"

#if NANOVLLM_WITH_CUDA

namespace nanovllm::cuda_ops {

void embedding(TensorView out, TensorView ids, TensorView table, ops::Stream s);
void embedding_vocab_shard(TensorView out, TensorView ids, TensorView table, int64_t vocab_begin, ops::Stream s);
void gather_vocab_shards(TensorView out, TensorView shards, ops::Stream s);
void rms_norm(TensorView out, TensorView x, TensorView weight, float eps, ops::Stream s);
void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, ops::Stream s);
void copy_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, ops::Stream s);
void gather_add_rms_norm(TensorView out, TensorView out_residual, TensorView x, TensorView residual, TensorView rows,
                         TensorView weight, float eps, ops::Stream s);
void linear(TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s,
            ops::LinearHint hint = ops::LinearHint::kNone);
void linear_fp8(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                ops::Stream s);
void linear_fp8_silu(TensorView act, TensorView in, TensorView weight, TensorView weight_scale, TensorView gate_up,
                     ops::Stream s);
// The KV caches: bf16, or fp8 codes + scales (kernels/kv_cache.h; kv_fp8.cuh).
void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const ops::RopeParams& rope, const KvCacheTensor& k_cache,
                  const KvCacheTensor& v_cache, const AttentionMetadata& meta, ops::Stream s);
void paged_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                     const AttentionMetadata& meta, float scale, ops::Stream s);
void qkv_prologue_attention(TensorView out, TensorView q, TensorView qkv, TensorView q_norm, TensorView k_norm,
                            float eps, TensorView positions, const ops::RopeParams& rope, const KvCacheTensor& k_cache,
                            const KvCacheTensor& v_cache, const AttentionMetadata& meta, float scale, ops::Stream s);
void gather_kv_rows(TensorView out, const KvCacheTensor& cache, TensorView slots, ops::Stream s);
void silu_mul(TensorView out, TensorView gate_up, ops::Stream s);
void linear_silu_mul(TensorView out, TensorView gate_up, TensorView weight, TensorView act, ops::Stream s);
void silu_mlp(TensorView out, TensorView x, TensorView gate_up_w, TensorView down_w, TensorView gate_up,
              TensorView act, ops::Stream s);
void gather_rows(TensorView out, TensorView in, TensorView rows, ops::Stream s);
void convert(TensorView out, TensorView x, ops::Stream s);

}  // namespace nanovllm::cuda_ops

#endif  // NANOVLLM_WITH_CUDA
