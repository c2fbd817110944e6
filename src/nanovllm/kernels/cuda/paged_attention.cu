// paged_attention dispatcher: decode kernel (split-KV) when every query length is 1
// (meta.max_query_len == 1), the prefill/mixed kernel otherwise: tensor cores for head_dim 64 and 128
// (attention_prefill_tc.cu), SIMT for the rest (attention_prefill.cu).
// Split count (decode): enough CTAs for ~2 waves (S * Hk * head-chunks * splits ~ 2 x SMs), each split
// at least 256 keys of meta.max_context_len, at most kMaxSplits. Graph capture bakes the split count in;
// ranges are derived on the device from context_lens, so replays stay correct for any length, and
// capturing with meta.max_context_len = the longest context to be served sizes it for the worst case.
// Split partials live in a per-device workspace, grown (cudaMalloc) only when a larger decode shape is
// first seen: run warm-up steps with the largest decode batch before graph capture.
#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "nanovllm/kernels/cuda/attention_common.cuh"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kMaxSplits = 32;
constexpr int kMinKeysPerSplit = 256;
constexpr int kMaxDevices = 64;

struct Workspace {
  std::mutex mu;
  void* data = nullptr;
  size_t bytes = 0;
};

// Grow-only scratch for split partials on `device`; the old block is freed (cudaFree synchronises).
void* workspace(int device, size_t bytes) {
  static std::array<Workspace, kMaxDevices> ws;
  Workspace& w = ws[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.bytes < bytes) {
    if (w.data) CUDA_CHECK(cudaFree(w.data));
    w.data = nullptr;
    CUDA_CHECK(cudaMalloc(&w.data, bytes));
    w.bytes = bytes;
  }
  return w.data;
}

int decode_splits(int64_t ctas, int64_t max_ctx, int sms) {
  int64_t by_len = (max_ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  int64_t by_occupancy = (2 * int64_t{sms} + ctas - 1) / ctas;
  int64_t n = std::min<int64_t>({by_len, by_occupancy, kMaxSplits});
  return static_cast<int>(std::max<int64_t>(n, 1));
}

}  // namespace

void paged_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                     const AttentionMetadata& meta, float scale, ops::Stream s) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t Hk = k_cache.dim(2);
  if (T == 0 || meta.num_seqs == 0) return;
  NANOVLLM_CHECK(q.dtype() == DType::kBF16 && out.dtype() == DType::kBF16 && k_cache.dtype() == DType::kBF16 &&
                     v_cache.dtype() == DType::kBF16,
                 "paged_attention (cuda): q, out and the KV caches must be BF16");
  NANOVLLM_CHECK(Hk > 0 && Hq % Hk == 0, "paged_attention (cuda): Hq ", Hq, " not a multiple of Hk ", Hk);
  const cudaStream_t st = stream_of(s);
  attn::Params p{};
  p.q = q.data_as<const __nv_bfloat16>();
  p.out = out.data_as<__nv_bfloat16>();
  p.k_cache = k_cache.data_as<const __nv_bfloat16>();
  p.v_cache = v_cache.data_as<const __nv_bfloat16>();
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

  if (meta.max_query_len == 1) {
    const int device = q.device().index;
    const int gc = p.g <= 8 ? p.g : (D > 128 ? 8 : 16);
    const int64_t ctas = meta.num_seqs * Hk * ((p.g + gc - 1) / gc);
    p.num_splits = decode_splits(ctas, meta.max_context_len, cuda_sm_count(device));
    if (p.num_splits > 1) {
      const size_t parts = static_cast<size_t>(meta.num_seqs * Hq * p.num_splits);
      char* w = static_cast<char*>(workspace(device, parts * (static_cast<size_t>(D) + 1) * sizeof(float)));
      p.part_o = reinterpret_cast<float*>(w);                                      // [S, Hq, splits, D]
      p.part_lse = reinterpret_cast<float*>(w + parts * static_cast<size_t>(D) * sizeof(float));  // [S, Hq, splits]
    }
    attn::launch_decode(p, static_cast<int>(D), st);
    if (p.num_splits > 1) attn::launch_combine(p, static_cast<int>(D), st);
  } else {
    if (!attn::launch_prefill_tc(p, static_cast<int>(D), T, st)) attn::launch_prefill(p, static_cast<int>(D), T, st);
  }
}

}  // namespace nanovllm::cuda_ops
