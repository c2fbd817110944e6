// sparse_decode_attention with Dual Chunk Attention (kernels/sparse_ops.h; docs/sparse_attention.md, "With Dual
// Chunk Attention"): decode attention over the selected pages, each key scored with the query rotation of its
// region for the query at position ctx - 1 (dca_region: the query's chunk, the previous one, or earlier).
//
// One CTA per (sequence, KV head) of kWarps warps. Key e of the item (e < its selected keys) is offset e % BS of
// page list[e / BS] (pages whole but the context's last, which comes last), read straight through the block table.
// Each warp walks its share of the keys a few at a time (their loads in flight together): per key the lane's D / 32
// dims of K and V, one dot product per query head of the group (fp32, warp-reduced) with the key's rotation, and a
// base-2 online softmax per head; then the warps' (max, sum, output) are merged in shared memory. The selection is small (the budget: a few thousand keys), so a
// SIMT kernel reads it at a fraction of the step's time; the plain path's virtual-batch trick does not apply,
// because the tuned decode kernels tell a key's region from its index in the sequence.
#include <cuda_bf16.h>

#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxGroup = 16;  // query heads per KV head
constexpr float kLog2e = 1.4426950408889634f;

// q [3, S, Hq, D]; caches [NB, BS, Hk, D]; block_tables [S, MB]; selected [S, Hk, K]; out [S, Hq, D].
// Shared: qs [3, G, D] (scaled by scale x log2 e), then per warp [G] max, [G] sum, [G, D] output.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    dca_sparse_decode_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ q,
                             const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
                             const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens,
                             const int32_t* __restrict__ selected, int num_seqs, int hq, int hk, int budget,
                             int block_size, int max_blocks, int chunk_len, float scale) {
  constexpr int V = D / 32;            // dims per lane
  constexpr int U = D == 256 ? 2 : 4;  // keys per warp in flight
  extern __shared__ float smem[];
  const int item = blockIdx.x, s = item / hk, h = item % hk, G = hq / hk;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* qs = smem;                 // [3, G, D]
  float* wmax = qs + 3 * G * D;     // [kWarps, G]
  float* wsum = wmax + kWarps * G;  // [kWarps, G]
  float* wout = wsum + kWarps * G;  // [kWarps, G, D]
  pdl_wait();                       // q, the selection and this step's keys come from the preceding kernels
  pdl_trigger();
  const int64_t rot_stride = int64_t{num_seqs} * hq * D;
  for (int e = threadIdx.x; e < 3 * G * D; e += blockDim.x) {
    const int r = e / (G * D), rest = e % (G * D);
    qs[e] = __bfloat162float(q[r * rot_stride + (int64_t{s} * hq + int64_t{h} * G) * D + rest]) * scale * kLog2e;
  }
  const int ctx = context_lens[s], qpos = ctx - 1;
  const int32_t* list = selected + int64_t{item} * budget;
  // The item's key count: the listed pages whole, but the context's last page (the highest, listed last).
  int listed = 0;
  while (listed < budget && list[listed] >= 0) ++listed;
  const int nkeys = listed == 0 ? 0 : (listed - 1) * block_size + min(block_size, ctx - list[listed - 1] * block_size);
  __syncthreads();

  float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][V];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int v = 0; v < V; ++v) acc[g][v] = 0.0f;
  }
  const int qchunk = qpos / chunk_len;
  // Warp w takes keys [w U + i kWarps U, + U): the U keys' list, block-table and K / V loads are issued before any is
  // used (each key is a chain of three dependent loads; one at a time, the walk is latency-bound).
  for (int e0 = warp * U; e0 < nkeys; e0 += kWarps * U) {
    float kf[U][V], vf[U][V];
    int region[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u;
      region[u] = -1;  // past the keys (uniform over the warp)
#pragma unroll
      for (int v = 0; v < V; ++v) kf[u][v] = vf[u][v] = 0.0f;
      if (e >= nkeys) continue;
      const int page = list[e / block_size], o = e % block_size, pos = page * block_size + o;
      const int kc = pos / chunk_len;
      region[u] = kc >= qchunk ? 0 : kc == qchunk - 1 ? 1 : 2;
      const int64_t row = ((int64_t{block_tables[int64_t{s} * max_blocks + page]} * block_size + o) * hk + h) * D;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        kf[u][v] = __bfloat162float(k_cache[row + lane * V + v]);
        vf[u][v] = __bfloat162float(v_cache[row + lane * V + v]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (region[u] < 0) break;
      const float* qr = qs + region[u] * G * D + lane * V;
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G) break;
        float dot = 0.0f;
#pragma unroll
        for (int v = 0; v < V; ++v) dot = fmaf(qr[g * D + v], kf[u][v], dot);
        dot = warp_sum(dot);  // base-2 logit
        const float m_new = fmaxf(m[g], dot);
        const float corr = exp2f(m[g] - m_new), p = exp2f(dot - m_new);
        m[g] = m_new;
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int v = 0; v < V; ++v) acc[g][v] = fmaf(acc[g][v], corr, p * vf[u][v]);
      }
    }
  }
  // Merge the warps: each writes its state, then the CTA combines per (head, dim).
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    if (lane == 0) {
      wmax[warp * G + g] = m[g];
      wsum[warp * G + g] = l[g];
    }
#pragma unroll
    for (int v = 0; v < V; ++v) wout[(warp * G + g) * D + lane * V + v] = acc[g][v];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, wmax[w * G + g]);
    float sum = 0.0f, o = 0.0f;
    if (mx > -INFINITY) {
      for (int w = 0; w < kWarps; ++w) {
        const float f = exp2f(wmax[w * G + g] - mx);  // 0 for a warp without keys
        sum += wsum[w * G + g] * f;
        o += wout[(w * G + g) * D + d] * f;
      }
    }
    out[(int64_t{s} * hq + int64_t{h} * G + g) * D + d] = __float2bfloat16_rn(sum > 0.0f ? o / sum : 0.0f);
  }
}

}  // namespace

void dual_chunk_sparse_decode_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                                        TensorView block_tables, TensorView context_lens, TensorView selected,
                                        const ops::DualChunkParams& dca, float scale, ops::Stream s) {
  constexpr const char* op = "sparse_decode_attention (cuda, Dual Chunk Attention)";
  NANOVLLM_CHECK(q.dtype() == DType::kBF16 && k_cache.dtype() == DType::kBF16 && out.dtype() == DType::kBF16, op,
                 ": q, out and the KV cache must be BF16");
  const int64_t S = q.dim(1), Hq = q.dim(2), D = q.dim(3), Hk = k_cache.dim(2), G = Hq / Hk;
  if (S == 0) return;
  NANOVLLM_CHECK(D == 64 || D == 128 || D == 256, op, ": head_dim ", D, " (64, 128 or 256)");
  NANOVLLM_CHECK(G <= kMaxGroup, op, ": ", G, " query heads per KV head (at most ", kMaxGroup, ")");
  const size_t smem = static_cast<size_t>(3 * G * D + 2 * kWarps * G + kWarps * G * D) * sizeof(float);
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, context_of(s).device()));
  NANOVLLM_CHECK(smem <= static_cast<size_t>(optin), op, ": ", G, " query heads of head_dim ", D, " need ", smem,
                 " bytes of shared memory; the device has ", optin);
  const auto launch = [&](auto kernel) {
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch_pdl(kernel, dim3(static_cast<unsigned>(S * Hk)), dim3(kWarps * 32), smem, s, out.data_as<__nv_bfloat16>(),
               q.data_as<const __nv_bfloat16>(), k_cache.data_as<const __nv_bfloat16>(),
               v_cache.data_as<const __nv_bfloat16>(), block_tables.data_as<const int32_t>(),
               context_lens.data_as<const int32_t>(), selected.data_as<const int32_t>(), static_cast<int>(S),
               static_cast<int>(Hq), static_cast<int>(Hk), static_cast<int>(selected.dim(2)),
               static_cast<int>(k_cache.dim(1)), static_cast<int>(block_tables.dim(1)), static_cast<int>(dca.chunk_len),
               scale);
  };
  if (D == 64) return launch(dca_sparse_decode_kernel<64>);
  if (D == 128) return launch(dca_sparse_decode_kernel<128>);
  launch(dca_sparse_decode_kernel<256>);
}

}  // namespace nanovllm::cuda_ops
