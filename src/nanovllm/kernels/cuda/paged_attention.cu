// paged_attention dispatcher: decode kernel (split-KV) when every query length is 1
// (meta.max_query_len == 1), the prefill/mixed kernel otherwise: tensor cores for head_dim 64 and 128
// (wgmma on sm_90a: attention_prefill_wgmma.cu; mma.sync elsewhere: attention_prefill_tc.cu), SIMT for the
// rest (attention_prefill.cu). A mixed step's leading one-token queries (meta.num_leading_decodes, head_dim
// 64 / 128) take the decode kernel and only the rest the prefill kernel: the prefill kernel's 64-item
// CTA would hold one decode row's G heads (H200, 240 decodes + 8,192 rows of 0.6B heads: 382 -> 269 us).
//
// Decode, head_dim 64 / 128 (tensor-core kernel, fused combine): the host picks only the most splits
// per sequence, S_max = min(kMaxSplits, ceil(max_context_len / kMinSplitKeys), ceil(kTargetCtasPerSm x
// SMs / CTAs)) with CTAs = seqs x KV heads x head chunks; each sequence then takes
// clamp(ctx / kMinSplitKeys, 1, S_max) splits on the device from context_lens (attention_decode.cu), so a
// graph captured with max_context_len = max_model_len still gives short contexts few, full splits and
// empty split slots exit at once. Single-split sequences write the output directly.
// Decode, head_dim 256 (SIMT kernel + combine launch): ~2 waves of CTAs, each split >= 256 keys of
// meta.max_context_len, at most kMaxSplits; ranges derived on the device from context_lens.
// fp8 KV cache (kernels/kv_cache.h): the same kernels (tensor-core decode and wgmma prefill for head_dim 64 / 128,
// the mma.sync prefill without wgmma, SIMT for other head dims) dequantize K / V tiles to bf16(code x scale) in
// shared memory; only the fused decode prologue is bf16-only (the qkv_prologue kernel quantizes the new rows).
// Split partials (and the fused combine's arrival counters, zeroed once) live in a workspace of the
// device context, grown (cudaMalloc) only when a larger decode shape is first seen: run warm-up steps with
// the largest decode batch before graph capture.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "nanovllm/kernels/cuda/attention_common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"

namespace nanovllm::cuda_ops {

namespace attn {

Params attention_params(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                        const AttentionMetadata& meta, float scale) {
  const int64_t Hq = q.dim(1), Hk = k_cache.dim(2);
  NANOVLLM_CHECK(q.dtype() == DType::kBF16 && out.dtype() == DType::kBF16 &&
                     (k_cache.fp8() || k_cache.dtype() == DType::kBF16) && v_cache.dtype() == k_cache.dtype(),
                 "paged_attention (cuda): q and out must be BF16, the KV caches BF16 or fp8");
  NANOVLLM_CHECK(Hk > 0 && Hq % Hk == 0, "paged_attention (cuda): Hq ", Hq, " not a multiple of Hk ", Hk);
  Params p{};
  p.q = q.data_as<const __nv_bfloat16>();
  p.out = out.data_as<__nv_bfloat16>();
  p.k_cache = k_cache.data_as<const __nv_bfloat16>();
  p.v_cache = v_cache.data_as<const __nv_bfloat16>();
  if (k_cache.fp8()) {
    p.k_scale = k_cache.scale.data_as<const float>();
    p.v_scale = v_cache.scale.data_as<const float>();
  }
  p.cu = meta.cu_seqlens_q.data_as<const int32_t>();
  p.ctx = meta.context_lens.data_as<const int32_t>();
  p.bt = meta.block_tables.data_as<const int32_t>();
  p.max_blocks = meta.block_tables.dim(1);
  p.block_size = static_cast<int>(k_cache.dim(1));
  p.num_seqs = static_cast<int>(meta.num_seqs);
  p.hq = static_cast<int>(Hq);
  p.hk = static_cast<int>(Hk);
  p.g = static_cast<int>(Hq / Hk);
  p.scale_log2 = scale * 1.4426950408889634f;
  p.num_splits = 1;
  return p;
}

}  // namespace attn

namespace {

constexpr int kMaxSplits = 32;
constexpr int kMinKeysPerSplit = 256;  // SIMT path
// Tensor-core decode: splits of >= 64 keys (one 16-key tile per warp), and only as many as it takes to
// reach ~4 CTAs per SM (2 waves at 2 CTAs per SM, D 128). A CTA's start (metadata and block-table round
// trips before its first KV load) and its partial write and merge cost ~1.5 us, so few long CTAs beat
// many short ones even with ragged lengths (H200, 256 seqs U[100, 2000]: 16 per SM 287 us, 4 per SM
// 270 us; 64 seqs x 1000: 86 -> 81 us); the runner orders a decode batch longest first for the tail.
constexpr int kTcMinSplitKeys = 64;
constexpr int kTcTargetCtasPerSm = 4;

// A device context's split-KV scratch (DeviceContext::op_state): [0] partial outputs and LSEs, [1] the
// fused combine's arrival counters.
struct AttentionWorkspace {
  std::array<void*, 2> data{};
  std::array<size_t, 2> bytes{};
  AttentionWorkspace() = default;
  ~AttentionWorkspace() {
    for (void* d : data) cudaFree(d);
  }
  AttentionWorkspace(const AttentionWorkspace&) = delete;
  AttentionWorkspace& operator=(const AttentionWorkspace&) = delete;
};

// Grow-only scratch `slot` of s's context; the old block is freed (cudaFree synchronises). `zero`: cleared
// on s's stream (ordered before the kernel that uses it) when (re)allocated: arrival counters, which the
// kernels leave at zero.
void* workspace(int slot, size_t bytes, bool zero, ops::Stream s) {
  AttentionWorkspace& w =
      context_of(s).op_state<AttentionWorkspace>([] { return std::make_unique<AttentionWorkspace>(); });
  const size_t i = static_cast<size_t>(slot);
  if (w.bytes[i] < bytes) {
    if (w.data[i]) CUDA_CHECK(cudaFree(w.data[i]));
    w.data[i] = nullptr;
    CUDA_CHECK(cudaMalloc(&w.data[i], bytes));
    w.bytes[i] = bytes;
    if (zero) CUDA_CHECK(cudaMemsetAsync(w.data[i], 0, bytes, stream_of(s)));
  }
  return w.data[i];
}

int decode_splits(int64_t ctas, int64_t max_ctx, int sms) {
  int64_t by_len = (max_ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  int64_t by_occupancy = (2 * int64_t{sms} + ctas - 1) / ctas;
  int64_t n = std::min<int64_t>({by_len, by_occupancy, kMaxSplits});
  return static_cast<int>(std::max<int64_t>(n, 1));
}

// The SIMT split-KV decode (head_dim 256; `dca`: Dual Chunk Attention) over p.num_seqs one-token queries:
// ~2 waves of CTAs, the splits merged by the combine kernel.
void launch_simt_decode(attn::Params p, int D, int64_t max_context, ops::Stream s, bool dca) {
  const int64_t S = p.num_seqs, Hq = p.hq, Hk = p.hk;
  const cudaStream_t st = stream_of(s);
  const int gc = p.g <= 8 ? p.g : (D > 128 ? 8 : 16);
  const int64_t ctas = S * Hk * ((p.g + gc - 1) / gc);
  p.num_splits = decode_splits(ctas, max_context, context_of(s).sm_count());
  if (p.num_splits > 1) {
    const size_t parts = static_cast<size_t>(S * Hq * p.num_splits);
    char* w = static_cast<char*>(workspace(0, parts * (static_cast<size_t>(D) + 1) * sizeof(float), false, s));
    p.part_o = reinterpret_cast<float*>(w);                                      // [S, Hq, splits, D]
    p.part_lse = reinterpret_cast<float*>(w + parts * static_cast<size_t>(D) * sizeof(float));  // [S, Hq, splits]
  }
  attn::launch_decode(p, D, st, dca);
  if (p.num_splits > 1) attn::launch_combine(p, D, st);
}

// Decode attention over p.num_seqs one-token queries; max_context bounds their context lengths (launch
// sizing: a CUDA graph replays the launch for any context up to it).
// prologue: p's qkv fields are set and the tensor-core kernel runs the prologue itself (sm_90, D 64 / 128).
// single_wave: AttentionMetadata::decode_single_wave (tensor-core kernel only).
// dca: Dual Chunk Attention (p.q_succ, p.q_inter, p.dca_chunk_len set; not with prologue).
void launch_decode_attention(attn::Params p, int D, int64_t max_context, ops::Stream s, bool prologue = false,
                             bool single_wave = false, bool dca = false) {
  const int64_t S = p.num_seqs, Hq = p.hq, Hk = p.hk;
  const DeviceContext& ctx = context_of(s);
  const cudaStream_t st = stream_of(s);
  if (attn::decode_tc_supported(D)) {
    const int gc = p.g <= 16 ? p.g : 16;  // heads per CTA (MMA rows)
    const int64_t units = Hk * ((p.g + gc - 1) / gc);
    const int64_t ctas = S * units;
    const int64_t min_keys = kTcMinSplitKeys, target_per_sm = kTcTargetCtasPerSm;
    const int64_t by_len = (std::max<int64_t>(max_context, 1) + min_keys - 1) / min_keys;
    const int64_t by_occupancy =
        single_wave ? std::max<int64_t>(1, attn::decode_tc_resident_ctas_per_sm(D) * ctx.sm_count() / ctas)
                    : (target_per_sm * ctx.sm_count() + ctas - 1) / ctas;
    const bool cluster = ctx.options.decode_cluster_combine && attn::decode_cluster_available(ctx.device());
    const int64_t max_splits = cluster ? attn::kMaxDecodeClusterSplits : kMaxSplits;
    p.num_splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({by_len, by_occupancy, max_splits})));
    p.min_split_keys = static_cast<int>(min_keys);
    if (p.num_splits > 1 && !cluster) {
      const size_t parts = static_cast<size_t>(S * Hq * p.num_splits);
      // Sized by a bound monotone in the batch (S x splits <= S + target CTAs / units), so warm-up with
      // the largest batch sizes it for every smaller graph captured later.
      const int64_t bound = std::min<int64_t>(S * kMaxSplits, S + (target_per_sm * ctx.sm_count() + units - 1) / units);
      const size_t cap = std::max(parts, static_cast<size_t>(bound * Hq));
      char* w = static_cast<char*>(workspace(0, cap * (static_cast<size_t>(D) + 1) * sizeof(float), false, s));
      p.part_o = reinterpret_cast<float*>(w);                                                      // [S, Hq, splits, D]
      p.part_lse = reinterpret_cast<float*>(w + parts * static_cast<size_t>(D) * sizeof(float));  // [S, Hq, splits]
      p.split_counters = static_cast<int*>(
          workspace(1, static_cast<size_t>(ctas) * sizeof(int), true, s));  // [S, Hk * head chunks]
    }
    attn::launch_decode_tc(p, D, gc, cluster && p.num_splits > 1, prologue, s, dca);
    return;
  }
  NANOVLLM_CHECK(!prologue, "paged_attention (cuda): the fused prologue needs the tensor-core decode kernel");
  launch_simt_decode(p, D, max_context, s, dca);
}

}  // namespace

void attn::launch_dual_chunk_decode(Params p, int head_dim, int64_t max_context, ops::Stream s) {
  launch_decode_attention(p, head_dim, max_context, s, /*prologue=*/false, /*single_wave=*/false, /*dca=*/true);
}

void paged_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache, const KvCacheTensor& v_cache,
                     const AttentionMetadata& meta, float scale, ops::Stream s) {
  const int64_t T = q.dim(0), D = q.dim(2);
  if (T == 0 || meta.num_seqs == 0) return;
  const cudaStream_t st = stream_of(s);
  const attn::Params p = attn::attention_params(out, q, k_cache, v_cache, meta, scale);
  const int d = static_cast<int>(D);
  if (meta.max_query_len == 1) {
    launch_decode_attention(p, d, meta.max_context_len, s, /*prologue=*/false, meta.decode_single_wave);
    return;
  }
  // A mixed step: its leading decodes through the decode kernel (each KV head read once per GQA group,
  // split-KV), the rest through the prefill kernel. Both index rows through cu_seqlens, so the prefill
  // part is the same arrays from sequence nd on. The decode tensor-core kernel needs head_dim 64 / 128.
  const int nd = attn::decode_tc_supported(d) ? static_cast<int>(meta.num_leading_decodes) : 0;
  if (nd > 0) {
    attn::Params dp = p;
    dp.num_seqs = nd;
    launch_decode_attention(dp, d, meta.max_context_len, s);
  }
  if (nd == p.num_seqs) return;
  attn::Params pp = p;
  pp.cu += nd;
  pp.ctx += nd;
  pp.bt += int64_t{nd} * p.max_blocks;
  pp.num_seqs = p.num_seqs - nd;
  const int64_t prefill_rows = T - nd;
  const bool wgmma = context_of(s).options.prefill_wgmma && attn::launch_prefill_wgmma(pp, d, prefill_rows, st);
  if (!wgmma && !attn::launch_prefill_tc(pp, d, prefill_rows, st))
    attn::launch_prefill(pp, d, prefill_rows, st);
}

void qkv_prologue_attention(TensorView out, TensorView q, TensorView qkv, TensorView q_norm, TensorView k_norm,
                            float eps, TensorView positions, const ops::RopeParams& rope, const KvCacheTensor& k_cache,
                            const KvCacheTensor& v_cache, const AttentionMetadata& meta, float scale, ops::Stream s) {
  const int64_t T = q.dim(0), D = q.dim(2);
  const DeviceContext& ctx = context_of(s);
  auto bf16_or_none = [](TensorView t) {
    return !t.defined() || t.numel() == 0 || t.data() == nullptr || (t.dtype() == DType::kBF16 && aligned16(t.data()));
  };
  const bool fused = ctx.options.decode_fused_prologue && !k_cache.fp8() && T > 0 && meta.num_seqs > 0 && meta.max_query_len == 1 &&
                     attn::decode_tc_supported(static_cast<int>(D)) && qkv.dtype() == DType::kBF16 &&
                     aligned16(qkv.data()) && bf16_or_none(q_norm) && bf16_or_none(k_norm) &&
                     aligned16(k_cache.data()) && aligned16(v_cache.data()) &&
                     attn::decode_cluster_available(ctx.device());
  if (!fused) {
    cuda_ops::qkv_prologue(q, qkv, q_norm, k_norm, eps, positions, rope, k_cache, v_cache, meta, s);
    cuda_ops::paged_attention(out, q, k_cache, v_cache, meta, scale, s);
    return;
  }
  attn::Params p = attn::attention_params(out, q, k_cache, v_cache, meta, scale);
  auto ptr_or_null = [](TensorView t) {
    return t.defined() && t.numel() > 0 ? t.data_as<const __nv_bfloat16>() : nullptr;
  };
  p.qkv = qkv.data_as<const __nv_bfloat16>();
  p.q_norm = ptr_or_null(q_norm);
  p.k_norm = ptr_or_null(k_norm);
  p.eps = eps;
  p.positions = positions.data_as<const int32_t>();
  p.inv_freq = rope.inv_freq.data_as<const float>();
  p.rope_pairs = static_cast<int>(rope.inv_freq.numel());
  p.rope_interleaved = rope.interleaved;
  p.rope_scaling = rope.attention_scaling;
  p.slots = meta.slot_mapping.data_as<const int32_t>();
  launch_decode_attention(p, static_cast<int>(D), meta.max_context_len, s, /*prologue=*/true);
}

}  // namespace nanovllm::cuda_ops
