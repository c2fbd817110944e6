// CPU reference kernels: fp32 math (fp64 for reductions), threaded with parallel_for. The entry points
// in ops.cpp validate shapes, dtypes and index ranges before calling these; the kernels trust them.
// Float tensors may be F32, BF16 or F16 (converted per row); index tensors are I32.
#pragma once

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/kv_cache.h"

namespace nanovllm::cpu {

// id_offset: table row r holds id id_offset + r; ids with no row give zeros (ops::embedding_vocab_shard).
void embedding(TensorView out, TensorView ids, TensorView table, int64_t id_offset = 0);
void gather_vocab_shards(TensorView out, TensorView shards);
void rms_norm(TensorView out, TensorView x, TensorView weight, float eps);
void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps);
void copy_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps);
void gather_add_rms_norm(TensorView out, TensorView out_residual, TensorView x, TensorView residual, TensorView rows,
                         TensorView weight, float eps);
void linear(TensorView out, TensorView in, TensorView weight, TensorView bias);
// ops::linear_fp8: f64 sums over the dequantized weight (each weight one f32 product code x block scale).
void linear_fp8(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias);
// The CUDA fp8 GEMM's values: each row of `in` quantized per 128 columns (quantize_fp8_blocks of one row:
// scale = max |x| / 448, codes e4m3 of x / scale), then per 128-column block the exact sum of code products
// times both scales, summed over the blocks in f64.
void linear_fp8_quantized(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias);
// inv_freq [D/2] f32 on the host.
// RoPE as ops::RopeParams: inv_freq [rope_pairs] (0: D/2); interleaved pairs (2i, 2i + 1), else
// rotate_half pairs (i, i + D/2) (rope_pairs must then be D/2); elements past 2 rope_pairs pass through.
void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const float* inv_freq, float attention_scaling, const KvCacheTensor& k_cache,
                  const KvCacheTensor& v_cache, const AttentionMetadata& meta, int64_t rope_pairs = 0,
                  bool interleaved = false);
void paged_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                     const AttentionMetadata& meta, float scale);
void silu_mul(TensorView out, TensorView gate_up);
void gather_rows(TensorView out, TensorView in, TensorView rows);
void gather_kv_rows(TensorView out, const KvCacheTensor& cache, TensorView slots);
void convert(TensorView out, TensorView x);

}  // namespace nanovllm::cpu
