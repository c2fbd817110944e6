// Decode paged attention (every query length is 1): split-KV flash-decoding.
// Grid (seq, KV head x head chunk, split). A CTA owns keys [split * chunk, ...) of its sequence for all
// IT heads of its GQA group (queries shared in shared memory, fp32 pre-scaled). Its 4 warps take
// alternate 32-key tiles of that range, each through its own shared-memory tile (cp.async, no block
// barrier in the loop); several CTAs per SM keep enough loads in flight. The warps' softmax states are
// merged in shared memory at the end. With one split the CTA writes bf16 output directly; otherwise it
// writes the normalised partial output and its log2-sum-exp, and combine_kernel merges the splits.
#include <mutex>

#include "nanovllm/kernels/cuda/attention_common.cuh"

namespace nanovllm::cuda_ops::attn {
namespace {

template <int D, int IT>
struct DecodeCfg {
  static constexpr size_t kQBytes = size_t{IT} * D * 4;                      // [IT, D] f32
  static constexpr size_t kWarpTileBytes = size_t{2} * Dims<D>::kTileElems * 2;  // K and V tile per warp
  static constexpr size_t kPBytes = size_t{kWarps} * IT * kTileKeys * 4;    // [warps, IT, 32]
  static constexpr size_t kSmem = kQBytes + kWarps * kWarpTileBytes + kPBytes;
  // Final merge reuses each warp's tile region for [IT, D] acc + [IT] m + [IT] l.
  static_assert(size_t{IT} * (D + 2) * 4 <= kWarpTileBytes, "merge scratch must fit a warp's tile region");
};

template <int D, int IT>
__global__ void __launch_bounds__(kWarps * 32) decode_kernel(Params p, int gc) {
  using Cfg = DecodeCfg<D, IT>;
  using Dm = Dims<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* qs = reinterpret_cast<float*>(smem);  // [IT, D]
  unsigned char* tiles = smem + Cfg::kQBytes;  // [warps][K tile | V tile]
  float* ps = reinterpret_cast<float*>(smem + Cfg::kQBytes + kWarps * Cfg::kWarpTileBytes);  // [warps, IT, 32]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seq = blockIdx.x;
  const int gchunks = (p.g + gc - 1) / gc;
  const int kvh = blockIdx.y / gchunks;
  const int g0 = (blockIdx.y % gchunks) * gc;
  const int gcount = min(gc, p.g - g0);
  const int split = blockIdx.z;
  if (p.cu[seq + 1] - p.cu[seq] != 1) return;  // no query row for this sequence in this step
  const int64_t t = p.cu[seq];
  const int ctx = p.ctx[seq];
  // Split ranges are multiples of the CTA's stride (4 tiles) so warps stay balanced.
  const int stride = kWarps * kTileKeys;
  const int per_split = ((ctx + p.num_splits - 1) / p.num_splits + stride - 1) / stride * stride;
  const int k_begin = split * per_split;
  const int k_end = min(ctx, k_begin + per_split);

  for (int c = tid; c < IT * Dm::kChunks; c += blockDim.x) {
    const int i = c / Dm::kChunks, cc = c % Dm::kChunks;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (i < gcount) {
      const int64_t h = int64_t{kvh} * p.g + g0 + i;
      bf16x8_to_f32(*reinterpret_cast<const uint4*>(p.q + (t * p.hq + h) * D + cc * 8), f);
    }
    float4* dst = reinterpret_cast<float4*>(qs + i * D + cc * 8);
    dst[0] = make_float4(f[0] * p.scale_log2, f[1] * p.scale_log2, f[2] * p.scale_log2, f[3] * p.scale_log2);
    dst[1] = make_float4(f[4] * p.scale_log2, f[5] * p.scale_log2, f[6] * p.scale_log2, f[7] * p.scale_log2);
  }
  __syncthreads();

  int lim[IT];
  float m[IT], l[IT], acc[IT][Dm::kVpl];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    lim[it] = k_end - 1;
    m[it] = -INFINITY;
    l[it] = 0.0f;
#pragma unroll
    for (int v = 0; v < Dm::kVpl; ++v) acc[it][v] = 0.0f;
  }
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(tiles + warp * Cfg::kWarpTileBytes);
  __nv_bfloat16* vs = ks + Dm::kTileElems;
  float* pw = ps + warp * IT * kTileKeys;
  for (int key0 = k_begin + warp * kTileKeys; key0 < k_end; key0 += stride) {
    load_tile<D>(p, seq, kvh, key0, k_end, ks, vs, lane, 32);
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();
    attend_tile<D, IT>(qs, ks, vs, pw, key0, lim, m, l, acc, lane);
  }

  // Merge the 4 warps: each publishes (m, l, acc) in its own tile region.
  float* mine = reinterpret_cast<float*>(tiles + warp * Cfg::kWarpTileBytes);  // [IT, D] acc, [IT] m, [IT] l
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const float lsum = warp_sum(l[it]);
#pragma unroll
    for (int v = 0; v < Dm::kVpl; ++v) mine[it * D + lane * Dm::kVpl + v] = acc[it][v];
    if (lane == 0) {
      mine[IT * D + it] = m[it];
      mine[IT * D + IT + it] = lsum;
    }
  }
  __syncthreads();
  for (int e = tid; e < IT * D; e += blockDim.x) {
    const int it = e / D, d = e % D;
    if (it >= gcount) continue;
    float mw[kWarps], mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      mw[w] = reinterpret_cast<const float*>(tiles + w * Cfg::kWarpTileBytes)[IT * D + it];
      mx = fmaxf(mx, mw[w]);
    }
    float lsum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* src = reinterpret_cast<const float*>(tiles + w * Cfg::kWarpTileBytes);
      const float sc = mw[w] == -INFINITY ? 0.0f : exp2f(mw[w] - mx);
      lsum += src[IT * D + IT + it] * sc;
      o += src[it * D + d] * sc;
    }
    const int64_t h = int64_t{kvh} * p.g + g0 + it;
    if (p.num_splits == 1) {
      p.out[(t * p.hq + h) * D + d] = __float2bfloat16_rn(o / lsum);
    } else {
      const int64_t part = (int64_t{seq} * p.hq + h) * p.num_splits + split;
      p.part_o[part * D + d] = lsum > 0.0f ? o / lsum : 0.0f;
      if (d == 0) p.part_lse[part] = lsum > 0.0f ? mx + log2f(lsum) : -INFINITY;
    }
  }
}

// out[t, h, :] = sum_i 2^(lse_i - L) o_i with L = log2 sum_i 2^lse_i. Block per (seq, head), D threads.
template <int D>
__global__ void __launch_bounds__(D) combine_kernel(Params p) {
  const int seq = blockIdx.x / p.hq, h = blockIdx.x % p.hq, d = threadIdx.x;
  if (p.cu[seq + 1] - p.cu[seq] != 1) return;
  const int64_t t = p.cu[seq];
  const int64_t base = (int64_t{seq} * p.hq + h) * p.num_splits;
  float mx = -INFINITY;
  for (int i = 0; i < p.num_splits; ++i) mx = fmaxf(mx, p.part_lse[base + i]);
  float wsum = 0.0f, o = 0.0f;
  for (int i = 0; i < p.num_splits; ++i) {
    const float lse = p.part_lse[base + i];
    const float w = lse == -INFINITY ? 0.0f : exp2f(lse - mx);
    wsum += w;
    o += w * p.part_o[(base + i) * D + d];
  }
  p.out[(t * p.hq + h) * D + d] = __float2bfloat16_rn(o / wsum);
}

template <int D, int IT>
void launch(const Params& p, int gc, cudaStream_t st) {
  using Cfg = DecodeCfg<D, IT>;
  static std::once_flag once;
  std::call_once(once, [] {
    CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<D, IT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(Cfg::kSmem)));
  });
  const int gchunks = (p.g + gc - 1) / gc;
  const dim3 grid(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(p.hk * gchunks),
                  static_cast<unsigned>(p.num_splits));
  decode_kernel<D, IT><<<grid, kWarps * 32, Cfg::kSmem, st>>>(p, gc);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_for_group(const Params& p, cudaStream_t st) {
  // IT = the group size rounded up to a power of two (at most 16, 8 for D = 256; larger groups use head chunks).
  if (p.g <= 1) launch<D, 1>(p, 1, st);
  else if (p.g <= 2) launch<D, 2>(p, 2, st);
  else if (p.g <= 4) launch<D, 4>(p, 4, st);
  else if (p.g <= 8) launch<D, 8>(p, 8, st);
  else if constexpr (D > 128) launch<D, 8>(p, 8, st);  // D = 256: keep shared memory <= ~150 KB
  else launch<D, 16>(p, 16, st);
}

}  // namespace

void launch_decode(const Params& p, int head_dim, cudaStream_t st) {
  switch (head_dim) {
    case 64: launch_for_group<64>(p, st); break;
    case 128: launch_for_group<128>(p, st); break;
    case 256: launch_for_group<256>(p, st); break;
    default: NANOVLLM_FAIL("paged_attention (cuda): head_dim ", head_dim, " not built (64, 128, 256)");
  }
}

void launch_combine(const Params& p, int head_dim, cudaStream_t st) {
  const unsigned grid = static_cast<unsigned>(int64_t{p.num_seqs} * p.hq);
  switch (head_dim) {
    case 64: combine_kernel<64><<<grid, 64, 0, st>>>(p); break;
    case 128: combine_kernel<128><<<grid, 128, 0, st>>>(p); break;
    case 256: combine_kernel<256><<<grid, 256, 0, st>>>(p); break;
    default: NANOVLLM_FAIL("paged_attention (cuda): head_dim ", head_dim, " not built (64, 128, 256)");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops::attn
