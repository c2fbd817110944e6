// sparse_decode_attention with Dual Chunk Attention (kernels/sparse_ops.h; docs/sparse_attention.md, "With Dual
// Chunk Attention"): decode attention over the selected pages, each key scored with the query rotation of its
// region for the query at position ctx - 1 (dca_region: the query's chunk, the previous one, or earlier).
//
// A CTA per (sequence, KV head, split) of kWarps warps: an item's selected keys are split into `splits` ranges so that
// ~2 waves of CTAs fill the GPU (one CTA per item left a 128K..1M-token Quest step with 4 CTAs per layer on 132 SMs:
// 19.2 ms/token at 256K on an H200 against 9.5 ms without DCA). Key e of the item (e < its selected keys) is offset
// e % BS of page list[e / BS] (pages whole but the context's last, which comes last), read straight through the block
// table. Each warp walks its share of the range a few keys at a time (their loads in flight together): per key the
// lane's D / 32 dims of K and V, one dot product per query head of the group (fp32, warp-reduced) with the key's
// rotation, and a base-2 online softmax per head; then the warps' (max, sum, output) are merged in shared memory, and
// with several splits written as partials that dca_sparse_decode_combine merges by their maxima (split-KV). The
// plain path's virtual-batch kernels do not apply: they tell a key's region from its index in the sequence, which the
// gathered keys lose.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"
#include "nanovllm/kernels/cuda/op_workspace.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxGroup = 16;  // query heads per KV head
constexpr int kMinSplitKeys = 64;  // a split's share of the budget's keys: at least two rounds of the CTA's warps
constexpr int kMaxSplits = 64;
constexpr float kLog2e = 1.4426950408889634f;

struct WorkspaceTag {};

// Split partials of item i = (s, h), split p, head g of the group: max and sum [I, P, G], unnormalised output
// [I, P, G, D] (fp32, base-2 maxima). Null with one split: the kernel writes `out` itself.
struct Partials {
  float* max = nullptr;
  float* sum = nullptr;
  float* acc = nullptr;
};

// q [3, S, Hq, D]; caches [NB, BS, Hk, D]; block_tables [S, MB]; selected [S, Hk, K]; out [S, Hq, D].
// Grid (S x Hk, splits). Shared: qs [3, G, D] (scaled by scale x log2 e), then per warp [G] max, [G] sum, [G, D]
// output.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    dca_sparse_decode_kernel(__nv_bfloat16* __restrict__ out, Partials part, const __nv_bfloat16* __restrict__ q,
                             const __nv_bfloat16* __restrict__ k_cache, const __nv_bfloat16* __restrict__ v_cache,
                             const int32_t* __restrict__ block_tables, const int32_t* __restrict__ context_lens,
                             const int32_t* __restrict__ selected, int num_seqs, int hq, int hk, int budget,
                             int block_size, int max_blocks, int chunk_len, float scale) {
  constexpr int V = D / 32;            // dims per lane
  constexpr int U = D == 256 ? 2 : 4;  // keys per warp in flight
  extern __shared__ float smem[];
  const int item = blockIdx.x, s = item / hk, h = item % hk, G = hq / hk;
  const int split = blockIdx.y, splits = gridDim.y;
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
  const int per_split = (nkeys + splits - 1) / splits;
  const int k_begin = min(nkeys, split * per_split), k_end = min(nkeys, k_begin + per_split);
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
  for (int e0 = k_begin + warp * U; e0 < k_end; e0 += kWarps * U) {
    float kf[U][V], vf[U][V];
    int region[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u;
      region[u] = -1;  // past the keys (uniform over the warp)
#pragma unroll
      for (int v = 0; v < V; ++v) kf[u][v] = vf[u][v] = 0.0f;
      if (e >= k_end) continue;
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
    if (splits == 1) {
      out[(int64_t{s} * hq + int64_t{h} * G + g) * D + d] = __float2bfloat16_rn(sum > 0.0f ? o / sum : 0.0f);
    } else {
      const int64_t pg = (int64_t{item} * splits + split) * G + g;  // -inf / 0 for a split without keys
      if (d == 0) {
        part.max[pg] = mx;
        part.sum[pg] = sum;
      }
      part.acc[pg * D + d] = o;
    }
  }
}

// out [S, Hq, D] from the splits' partials: a CTA per (item, head of the group), a thread per dim.
__global__ void dca_sparse_decode_combine(__nv_bfloat16* __restrict__ out, Partials part, int hq, int hk, int splits,
                                          int D) {
  pdl_wait();  // the partials come from the preceding kernel
  pdl_trigger();
  const int G = hq / hk, item = blockIdx.x / G, g = blockIdx.x % G, s = item / hk, h = item % hk;
  const int64_t p0 = int64_t{item} * splits * G + g;  // split p: p0 + p G
  float mx = -INFINITY;
  for (int p = 0; p < splits; ++p) mx = fmaxf(mx, part.max[p0 + int64_t{p} * G]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f, o = 0.0f;
    if (mx > -INFINITY) {
      for (int p = 0; p < splits; ++p) {
        const int64_t pg = p0 + int64_t{p} * G;
        const float f = exp2f(part.max[pg] - mx);
        sum += part.sum[pg] * f;
        o += part.acc[pg * D + d] * f;
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
  const int optin = context_of(s).smem_optin();
  NANOVLLM_CHECK(smem <= static_cast<size_t>(optin), op, ": ", G, " query heads of head_dim ", D, " need ", smem,
                 " bytes of shared memory; the device has ", optin);
  // Splits: ~2 waves of CTAs over the items, each split at least kMinSplitKeys of the budget's keys.
  const int64_t items = S * Hk, max_keys = selected.dim(2) * k_cache.dim(1);
  const int64_t splits = std::clamp<int64_t>(
      std::min((2 * context_of(s).sm_count() + items - 1) / items, (max_keys + kMinSplitKeys - 1) / kMinSplitKeys), 1,
      kMaxSplits);
  Partials part;
  if (splits > 1) {
    // Sized for any batch: with several splits items < 2 x SMs, so items x splits < 4 x SMs. A workspace that grew
    // between decode-graph captures would leave the earlier graphs holding the freed block.
    const int64_t max_partials = 4 * int64_t{context_of(s).sm_count()};
    NANOVLLM_CHECK(items * splits <= max_partials, op, ": ", items, " x ", splits, " splits past the workspace");
    const int64_t n = max_partials * G;
    WorkspaceCarver size;
    size.take<float>(n);
    size.take<float>(n);
    size.take<float>(n * D);
    WorkspaceCarver carve(op_workspace<WorkspaceTag>(size.total(), s));
    part.max = carve.take<float>(n);
    part.sum = carve.take<float>(n);
    part.acc = carve.take<float>(n * D);
  }
  const auto launch = [&](auto kernel) {
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch_pdl(kernel, dim3(static_cast<unsigned>(items), static_cast<unsigned>(splits)), dim3(kWarps * 32), smem, s,
               out.data_as<__nv_bfloat16>(), part, q.data_as<const __nv_bfloat16>(),
               k_cache.data_as<const __nv_bfloat16>(),
               v_cache.data_as<const __nv_bfloat16>(), block_tables.data_as<const int32_t>(),
               context_lens.data_as<const int32_t>(), selected.data_as<const int32_t>(), static_cast<int>(S),
               static_cast<int>(Hq), static_cast<int>(Hk), static_cast<int>(selected.dim(2)),
               static_cast<int>(k_cache.dim(1)), static_cast<int>(block_tables.dim(1)), static_cast<int>(dca.chunk_len),
               scale);
  };
  if (D == 64) {
    launch(dca_sparse_decode_kernel<64>);
  } else if (D == 128) {
    launch(dca_sparse_decode_kernel<128>);
  } else {
    launch(dca_sparse_decode_kernel<256>);
  }
  if (splits > 1) {
    launch_pdl(dca_sparse_decode_combine, dim3(static_cast<unsigned>(items * G)), dim3(static_cast<unsigned>(D)), 0,
               s, out.data_as<__nv_bfloat16>(), part, static_cast<int>(Hq), static_cast<int>(Hk),
               static_cast<int>(splits), static_cast<int>(D));
  }
}

}  // namespace nanovllm::cuda_ops
