// Argument checks shared by the op entry points (ops.cpp, sparse_ops.cpp): each throws nanovllm::Error
// naming the op and the argument. Internal to kernels/.
#pragma once

#include <cstdint>
#include <string_view>

#include "nanovllm/core/error.h"
#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm::ops {

bool is_float(DType t);

// `name` of `op` must be defined, on `dev`, with the given rank.
void check_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, int ndim);
void check_float(std::string_view op, std::string_view name, const TensorView& t);  // F32, BF16 or F16
void check_i32(std::string_view op, std::string_view name, const TensorView& t);
void check_shape(std::string_view op, std::string_view name, const TensorView& t, Shape expected);
// A float tensor of the given shape on `dev`.
void check_float_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, Shape shape);
// An I32 tensor of the given shape on `dev`.
void check_i32_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, Shape shape);

// A K or V cache tensor (kv_cache.h) of rank ndim on `dev`: a float dtype without scales, or F8E4M3 codes with
// F32 scales of its shape less the last dimension.
void check_kv_tensor(std::string_view op, std::string_view name, const KvCacheTensor& cache, Device dev, int ndim);
// Two of them of one shape and dtype.
void check_kv_pair(std::string_view op, const KvCacheTensor& k, const KvCacheTensor& v, Device dev, int ndim,
                   std::string_view k_name = "k_cache", std::string_view v_name = "v_cache");
// Paged KV cache pair [NB, BS, Hk, D] of one dtype (kv_cache.h), BS == meta.block_size.
void check_kv_cache(std::string_view op, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache, Device dev,
                    const AttentionMetadata& meta);
// cu_seqlens_q [S+1], context_lens [S], block_tables [S, MB] i32; on the host also their contents.
void check_seq_metadata(std::string_view op, const AttentionMetadata& meta, int64_t T, int64_t num_blocks,
                        int64_t BS, Device dev);
// meta.slot_mapping [T] I32 in [-1, num_slots) (range checked on the host only), meta.num_tokens == T.
void check_slot_mapping(std::string_view op, const AttentionMetadata& meta, int64_t T, int64_t num_slots, Device dev);
// qkv_prologue's arguments: q_out [T, Hq, D], qkv [T, (Hq + 2 Hk) D], norms [D] or undefined, positions [T] i32,
// rope.inv_freq, the cache pair, the slot mapping.
void check_qkv_prologue(std::string_view op, TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm,
                        float eps, TensorView positions, const RopeParams& rope, const KvCacheTensor& k_cache,
                        const KvCacheTensor& v_cache, const AttentionMetadata& meta);
// paged_attention's arguments: out, q [T, Hq, D], the cache pair, GQA heads, a finite scale, metadata.
void check_paged_attention(std::string_view op, TensorView out, TensorView q, const KvCacheTensor& k_cache,
                           const KvCacheTensor& v_cache, const AttentionMetadata& meta, float scale);

#if !NANOVLLM_WITH_CUDA
[[noreturn]] void no_cuda(std::string_view op, Device dev);
#endif

}  // namespace nanovllm::ops

// In an op entry point with an ops::Stream `s`: return the CUDA op's result (after checking that s carries
// a device context), or, in a build without CUDA, fail naming the op.
#if NANOVLLM_WITH_CUDA
#define NANOVLLM_DISPATCH_CUDA(op, dev, ...) \
  return (static_cast<void>(::nanovllm::cuda_ops::context_of(s)), ::nanovllm::cuda_ops::op(__VA_ARGS__))
#else
#define NANOVLLM_DISPATCH_CUDA(op, dev, ...) (static_cast<void>(s), no_cuda(#op, dev))
#endif

