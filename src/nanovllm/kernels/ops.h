// Op entry points. Each validates shapes, dtypes and devices (NANOVLLM_CHECK) and dispatches on the
// tensors' device to kernels/cpu (reference, fp32 accumulation) or kernels/cuda.
//
// Dtypes. Activations: F32 on the CPU backend, BF16 on CUDA. Weights: F32, BF16 or F16. KV cache
// (kv_cache.h): the activations' dtype (or any float dtype on the CPU), or fp8 e4m3 codes with per-row f32
// scales (kv_cache_dtype fp8). Index tensors: I32.
//
// Shapes: T = tokens in the step, H = hidden size, Hq/Hk = query/KV heads, D = head_dim, S = sequences,
// V = vocab, I = intermediate size, NB = KV blocks, BS = block size.
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/kv_cache.h"

namespace nanovllm::cuda_ops {
class DeviceContext;  // kernels/cuda/device_context.h
}

namespace nanovllm::ops {

// Where an op runs (opaque pointers, so this header stays CUDA-free). Ignored on the CPU. On CUDA: the
// stream to launch on and the runner's per-device context (kernel options and choices, workspaces), which
// every CUDA op needs; the stream must belong to the context's device.
struct Stream {
  void* cuda_stream = nullptr;                       // cudaStream_t; nullptr = the legacy default stream
  cuda_ops::DeviceContext* cuda_context = nullptr;
};

// out[t, :] = table[ids[t], :].  out [T, H], ids [T] i32, table [V, H]. Ids outside [0, V) throw
// (CPU) — the engine validates prompts before they reach a kernel.
void embedding(TensorView out, TensorView ids, TensorView table, Stream s = {});

// The vocab-parallel embedding of one tensor-parallel rank: table [Vr, H] holds the rows of token ids
// [vocab_begin, vocab_begin + Vr); out[t, :] = table[ids[t] - vocab_begin, :] for ids in that range and
// zeros for every other id (another rank's row; the all-reduce that follows sums the ranks' rows).
// out [T, H], ids [T] i32, vocab_begin >= 0.
void embedding_vocab_shard(TensorView out, TensorView ids, TensorView table, int64_t vocab_begin, Stream s = {});

// Un-pads the all-gathered logits of a vocab-parallel LM head: out[s, r Vr + j] = shards[r, s, j] for
// every column r Vr + j < V (the last rank's padded rows are dropped). out [S, V] f32, shards [N, S, Vr]
// f32 with Vr = ceil(V / N) (trailing ranks may cover no column at all).
void gather_vocab_shards(TensorView out, TensorView shards, Stream s = {});

// out = x / sqrt(mean(x^2) + eps) * weight.  out, x [T, H]; weight [H].
void rms_norm(TensorView out, TensorView x, TensorView weight, float eps, Stream s = {});

// residual += x; x = rms_norm(residual) * weight (in place).  x, residual [T, H]; weight [H].
void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, Stream s = {});

// The first layer's add_rms_norm, before there is a residual: residual = x (converted to its dtype);
// x = rms_norm(residual) * weight.  x, residual [T, H]; weight [H].
void copy_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, Stream s = {});

// add_rms_norm of gathered rows into separate outputs: out_residual[i] = residual[rows[i]] + x[rows[i]];
// out[i] = rms_norm(out_residual[i]) * weight.  out, out_residual [S, H]; x, residual [T, H]; rows [S] i32;
// weight [H]. x and residual are unchanged.
void gather_add_rms_norm(TensorView out, TensorView out_residual, TensorView x, TensorView residual, TensorView rows,
                         TensorView weight, float eps, Stream s = {});

// Where a projection sits in the step, for backends that schedule around its neighbours.
//   kBeforeAttention: its output feeds the attention (the qkv projection). On CUDA a decode-sized one
//   then runs at one CTA per SM, so the decode attention's CTAs fit beside it and start their KV reads
//   while it still runs (H200, bs 1: 1-2 us per layer faster than the projection's fastest shape alone).
enum class LinearHint { kNone, kBeforeAttention };

// out = in @ weight^T (+ bias).  out [T, N], in [T, K], weight [N, K], bias [N] or undefined.
// out may be F32 while in is BF16 (the LM head writes fp32 logits). hint: never changes the values.
void linear(TensorView out, TensorView in, TensorView weight, TensorView bias, Stream s = {},
            LinearHint hint = LinearHint::kNone);

// A block-scaled fp8 projection (docs/fp8.md): out = in @ W^T (+ bias), W[n, k] = weight[n, k] *
// weight_scale[n / 128, k / 128]. out [T, N] (BF16 or F32), in [T, K] (F32 on the CPU, BF16 on CUDA), weight
// [N, K] F8E4M3, weight_scale [N / 128, K / 128] F32, bias [N] or undefined; N and K multiples of 128.
// CPU: the reference, in f64 over the dequantized weights and `in` as given. CUDA: up to kFp8MmaGemvMaxTokens
// rows stream the fp8 weights against the bf16 activations (fp32 accumulation: the reference's values up to
// the summation order); more rows quantize the activations per row and 128 columns (e4m3, scale = max |x| /
// 448) and multiply on fp8 tensor cores with fp32 accumulation per 128 columns — the activation quantization
// is then the difference from the reference (tests/cuda/test_cuda_fp8_linear.cpp states the tolerances).
void linear_fp8(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias,
                Stream s = {});

// act = silu_mul(in @ W^T) for a block-scaled fp8 gate_up projection (weight [2I, K] = [gate; up] and weight_scale
// as linear_fp8's): one kernel where the backend can (CUDA, one-token steps), otherwise linear_fp8 into gate_up
// [T, 2I], then silu_mul. Gate and up are rounded to gate_up's dtype before the activation either way. act [T, I];
// gate_up is scratch (contents unspecified afterwards).
void linear_fp8_silu(TensorView act, TensorView in, TensorView weight, TensorView weight_scale, TensorView gate_up,
                     Stream s = {});

// RoPE parameters: inv_freq [D/2] f32 (scaling already folded in) and the cos/sin multiplier (YaRN's
// attention factor; 1 otherwise). Rotation is the half-split ("rotate_half") form HF uses.
// RoPE on the first R = 2 * inv_freq.numel() elements of each head; elements [R, D) pass through.
// rotate_half (interleaved = false, R must be D): pairs (i, i + D/2) at frequency i (Qwen, Llama).
// interleaved (GLM-4, R <= D): pairs (2i, 2i + 1) at frequency i.
struct RopeParams {
  TensorView inv_freq;  // [R/2] f32
  float attention_scaling = 1.0f;
  bool interleaved = false;
};

// The attention prologue, fused on CUDA: split qkv [T, (Hq + 2 Hk) D] into q/k/v; optional per-head
// RMSNorm of q and k (q_norm/k_norm [D], undefined = skip); RoPE of q and k at positions [T] i32;
// q goes to q_out [T, Hq, D]; k and v are stored into the paged caches at meta.slot_mapping (an fp8 cache:
// each (token, KV head) row quantized with its own scale, kv_cache.h). k_cache/v_cache [NB, BS, Hk, D].
void qkv_prologue(TensorView q_out, TensorView qkv, TensorView q_norm, TensorView k_norm, float eps,
                  TensorView positions, const RopeParams& rope, const KvCacheTensor& k_cache,
                  const KvCacheTensor& v_cache, const AttentionMetadata& meta, Stream s = {});

// Causal paged attention for a mixed batch. Query row t of seq s at absolute position
// p = context_lens[s] - (cu[s+1] - t) attends cache positions 0..p of seq s through its block table.
// out, q [T, Hq, D]; k_cache/v_cache [NB, BS, Hk, D] (an fp8 cache is dequantized as its rows are read);
// GQA: head h reads KV head h / (Hq / Hk).
void paged_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                     const AttentionMetadata& meta, float scale, Stream s = {});

// qkv_prologue (q into `q`, K / V into the caches) then paged_attention, as one kernel where the backend
// can: CUDA decode steps (every query one token) on sm_90 with head_dim 64 / 128, where the attention
// kernel makes q and the new K / V itself (then `q` is not written). Same values either way.
void qkv_prologue_attention(TensorView out, TensorView q, TensorView qkv, TensorView q_norm, TensorView k_norm,
                            float eps, TensorView positions, const RopeParams& rope, const KvCacheTensor& k_cache,
                            const KvCacheTensor& v_cache, const AttentionMetadata& meta, float scale, Stream s = {});

// out = silu(gate_up[:, :I]) * gate_up[:, I:].  out [T, I], gate_up [T, 2I].
void silu_mul(TensorView out, TensorView gate_up, Stream s = {});

// out = silu_mul(gate_up) @ weight^T: the MLP down projection with the activation fused in where the
// backend can (CUDA, decode-sized bf16 batches: one kernel); otherwise silu_mul into `act`, then linear.
// Same values either way (the activation is rounded to act's dtype first). out [T, N], gate_up [T, 2I],
// weight [N, I], act [T, I] scratch (contents unspecified afterwards).
void linear_silu_mul(TensorView out, TensorView gate_up, TensorView weight, TensorView act, Stream s = {});

// The gated MLP: out = silu_mul(x @ gate_up_w^T) @ down_w^T. gate_up_w [2I, K] holds the gate rows, then
// the up rows. On CUDA the activation is fused into one of the projections where that is faster: into
// the gate_up projection's epilogue (large weights, decode-sized bf16 batches) or into the down
// projection's input (linear_silu_mul); otherwise linear, silu_mul, linear. Same values every way (gate
// and up are rounded to gate_up's dtype, the activation to act's). out [T, N], x [T, K], down_w [N, I];
// gate_up [T, 2I] and act [T, I] are scratch (contents unspecified afterwards). out may be x.
void silu_mlp(TensorView out, TensorView x, TensorView gate_up_w, TensorView down_w, TensorView gate_up,
              TensorView act, Stream s = {});

// out[i, :] = in[rows[i], :].  out [S, H], in [T, H], rows [S] i32.
void gather_rows(TensorView out, TensorView in, TensorView rows, Stream s = {});

// The K or V rows a step wrote, read back as floats (layer taps): out[t] = cache row (slots[t], every KV head),
// dequantized from an fp8 cache (kv_cache.h), converted to out's dtype. out [T, Hk, D] float; cache
// [NB, BS, Hk, D]; slots [T] i32 in [0, NB x BS).
void gather_kv_rows(TensorView out, const KvCacheTensor& cache, TensorView slots, Stream s = {});

// out = x converted to out's dtype (F32/BF16/F16 either way), same shape.
void convert(TensorView out, TensorView x, Stream s = {});

}  // namespace nanovllm::ops
