// Skinny GEMM for decode: out[T, N] = in[T, K] @ W[N, K]^T (+ bias), T <= 16, bf16 in/W, fp32 accumulate.
//
// At small T the op is a stream over W (N K 2 bytes) and nothing else matters: every SM must keep enough
// 16-byte weight loads in flight. Design:
//   * A warp owns a 16-row tile of W and a contiguous range of K. Per step each lane loads 4 x 16 bytes
//     from row g and 4 x 16 bytes from row g + 8 (g = lane / 4), the 4 lanes of a quad covering 256
//     contiguous bytes of each row, so a warp has 4 KB of W in flight per step.
//   * The products run on the tensor cores (mma.sync m16n8k16, W as the 16-row A operand, the tokens as
//     the 8-wide B operand; two B tiles for T > 8). The dot product's k order is free, so each lane uses
//     its 8 consecutive k (one 16-byte load) as its fragment k slots {2q, 2q+1, 2q+8, 2q+9} of two mma
//     k-steps, and loads the matching 16 bytes of x for token g: no shuffles, no conversions, no shared
//     memory on the hot path. x (T K 2 bytes) is read through L1 (ld.global.nc); tokens >= T reuse row
//     T - 1 (their columns are discarded) and rows >= N reuse row N - 1, so nothing is predicated but K.
//   * A CTA is 8 warps = RT row tiles x (8 / RT) K groups; K groups are summed through shared memory in
//     a fixed order. When the row tiles are too few to fill the GPU the K range is also split across
//     `k_split` CTAs: each writes fp32 partials [k_split, T, N] to a per-device workspace, and the last
//     CTA of a row group (atomic counter, reset by that CTA) sums them in split order: deterministic.
//   * W loads bypass L1 (no_allocate) with a 256-byte L2 prefetch hint (= one quad's row segment); each
//     warp keeps the next step's W loads in flight while the current step's products run.
//   * Launched with PDL (pdl.cuh): before waiting for the preceding kernel, each CTA requests its weight
//     slice (up to a per-CTA budget) into L2 with bulk prefetches and loads its first W step, so the
//     weight stream starts during the predecessor's tail.
//   * gemv_silu: x = silu(gate) * up computed from gate_up [T, 2K] on the fly (rounded to bf16 exactly
//     as silu_mul stores it), which removes the silu_mul launch and its round trip before down_proj.
//   * gemv_gate_up_silu: the other side of the same launch: the gate_up projection stores silu(gate) * up
//     itself. A CTA's first RT / 2 row tiles are gate rows and the others the matching up rows, so its
//     epilogue has both halves of each of its outputs.
//   * gemv_stream.cuh: a stream-K variant of the same warp step that cuts the work into equal per-warp
//     step ranges (one even wave whatever the shape).
//   * gemv_bulk.cuh (sm_90): the same products with W brought into a shared-memory ring by bulk copies
//     in 2 KB row pieces (weights under 64 MiB). The linear dispatch times all kinds per shape.
// The workspace is allocated at first use (run a warm-up step before capturing CUDA graphs), one per
// device context, used by one stream at a time like the cuBLASLt workspace in linear.cu.
#include <algorithm>
#include <memory>
#include <vector>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/gemv.cuh"
#include "nanovllm/kernels/cuda/gemv_bulk.cuh"
#include "nanovllm/kernels/cuda/gemv_device.cuh"
#include "nanovllm/kernels/cuda/gemv_stream.cuh"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

using namespace gemv_detail;
constexpr int kMaxSplit = 16;
constexpr size_t kWsBytes = size_t{16} << 20;  // fp32 partials [k_split, T, N]
constexpr int kMaxCounters = 1 << 16;          // row groups that can use the split path
// The default pick aims at this many CTAs per resident-CTA slot.
constexpr int kDefaultWaves = 4;
// Weights of at least kCapMinBytes take candidates of at most one CTA per SM (one resident wave of them).
// Measured on the H200 in decode-layer graphs with PDL: on the Qwen3-8B shapes (34-201 MB) 1 CTA/SM beat
// the best uncapped shapes by 6 us/layer (127 -> 120.5 us) although each gemv alone looks no faster: the
// next kernel's CTAs find room on every SM while the stream runs. On the Qwen3-0.6B shapes (4-13 MB, a
// few us each) the full resident count won by 2 us/layer: short streams need every load in flight from
// the start.
constexpr int64_t kCapMinBytes = int64_t{16} << 20;
// The bulk-copy kernel is a candidate for weights under kBulkMaxBytes (see gemv_candidates).
constexpr int64_t kBulkMaxBytes = int64_t{64} << 20;
// L2 prefetch budget per CTA: bytes of its weight slice requested before pdl_wait (more or less was
// slower on the Qwen3-8B shapes: docs/experiments.md).
constexpr unsigned kPrefetchCtaBytes = 64u << 10;

// kNT: 8-token B tiles (1: T <= 8, 2: T <= 16). Kv = K / 8; vpg = vectors per K group; x_pitch = vectors
// per x row (Kv, or 2 Kv for kSilu). prefetch_row_bytes: per-row cap of the L2 prefetch (0: none).
// kSiluOut: W = [gate; up] [N = 2I, K], out [T, I] bf16 = silu(gate) * up, each half rounded to bf16 first
// (the values gemv then silu_mul store); RT even, no K split (gridDim.y == 1).
//
// PDL (pdl.cuh): the weights are not produced by the preceding kernel, so before pdl_wait() each CTA
// asks the copy engine to stream its weight slice (up to the cap) into L2 and loads its first step of
// W into registers; x (the predecessor's output) is read only after the wait. The main loop keeps the
// next step's W loads in flight while the current step's products run (two register buffers).
template <int kNT, bool kOutF32, bool kSilu, bool kSiluOut = false>
__global__ void __launch_bounds__(kThreads, 2)
gemv_kernel(void* __restrict__ out, const uint4* __restrict__ x, int x_pitch, const uint4* __restrict__ w,
            const void* __restrict__ bias, int bias_dt, int T, int N, int Kv, int RT, int vpg,
            unsigned prefetch_row_bytes, float* __restrict__ ws, unsigned* __restrict__ counters) {
  static_assert(!(kSiluOut && (kSilu || kOutF32)), "the fused silu_mul output is bf16 of a plain x");
  __shared__ float red[kWarps][16][kNT * 8];  // per-warp C tiles [rows, tokens]
  __shared__ unsigned is_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int KS = kWarps / RT;
  const int rt = warp % RT, kg = warp / RT;
  // W row tile of the CTA's row tile `local` (kSiluOut: gate tiles, then the matching up tiles).
  const int half = RT / 2;
  auto w_tile = [&](int local) {
    if constexpr (kSiluOut) {
      const int b = static_cast<int>(blockIdx.x);
      return local < half ? b * half + local : N / 32 + b * half + (local - half);
    } else {
      return static_cast<int>(blockIdx.x) * RT + local;
    }
  };
  const int row_lo = w_tile(rt) * 16 + g;
  const int group = blockIdx.y * KS + kg;
  const int v_begin = min(Kv, group * vpg), v_end = min(Kv, v_begin + vpg);
  const uint4* w_lo = w + int64_t{min(row_lo, N - 1)} * Kv;
  const uint4* w_hi = w + int64_t{min(row_lo + 8, N - 1)} * Kv;

  // ---- Prologue (weights only). ----
  if (prefetch_row_bytes != 0 && threadIdx.x < RT * 16) {
    const int row = w_tile(threadIdx.x >> 4) * 16 + (threadIdx.x & 15);
    const int cv0 = min(Kv, static_cast<int>(blockIdx.y) * KS * vpg);
    const int cv1 = min(Kv, cv0 + KS * vpg);
    const unsigned bytes = min(static_cast<unsigned>(cv1 - cv0) * 16u, prefetch_row_bytes);
    if (row < N && bytes != 0) prefetch_l2_bulk(w + int64_t{row} * Kv + cv0, bytes);
  }
  uint4 a0_lo[kU], a0_hi[kU], a1_lo[kU], a1_hi[kU];
  auto load_w = [&](int vb, uint4 (&lo)[kU], uint4 (&hi)[kU]) {
    load_w_step(w_lo, w_hi, vb, v_end, q, lo, hi);
  };
  load_w(v_begin, a0_lo, a0_hi);

  pdl_wait();
  pdl_trigger();

  const uint4* xr[kNT];
  float acc[kNT][4];
  start_tiles<kNT>(x, x_pitch, g, T, xr, acc);

  // x for step vb, then the products with W held in (lo, hi). Out-of-range k: zero W and zero x.
  auto step = [&](int vb, const uint4 (&lo)[kU], const uint4 (&hi)[kU]) {
    mma_step<kNT, kSilu ? kXSilu : kXGlobal>(acc, lo, hi, xr, vb, v_end, q, Kv);
  };
  // Two W buffers, except with the fused silu where they would exceed the register budget (16 tokens; on
  // sm_80 / sm_89 any T: ptxas spills there).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  constexpr bool kPipe = !kSilu;
#else
  constexpr bool kPipe = !(kNT == 2 && kSilu);
#endif
  if constexpr (kPipe) {
    for (int vb = v_begin; vb < v_end; vb += 2 * kStepVecs) {
      if (vb + kStepVecs < v_end) load_w(vb + kStepVecs, a1_lo, a1_hi);
      step(vb, a0_lo, a0_hi);
      if (vb + kStepVecs >= v_end) break;
      if (vb + 2 * kStepVecs < v_end) load_w(vb + 2 * kStepVecs, a0_lo, a0_hi);
      step(vb + kStepVecs, a1_lo, a1_hi);
    }
  } else {
    for (int vb = v_begin; vb < v_end; vb += kStepVecs) {
      if (vb != v_begin) load_w(vb, a0_lo, a0_hi);
      step(vb, a0_lo, a0_hi);
    }
  }

  // C fragment: acc[nt][0..1] = rows g, tokens 8 nt + 2q + {0, 1}; acc[nt][2..3] = row g + 8.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    red[warp][g][8 * nt + 2 * q] = acc[nt][0];
    red[warp][g][8 * nt + 2 * q + 1] = acc[nt][1];
    red[warp][g + 8][8 * nt + 2 * q] = acc[nt][2];
    red[warp][g + 8][8 * nt + 2 * q + 1] = acc[nt][3];
  }
  __syncthreads();

  if constexpr (kSiluOut) {
    // Output row j of the CTA: gate in local tile j / 16, up in local tile j / 16 + RT / 2.
    const int I = N / 2, outs_cta = half * 16, items = outs_cta * T;
    for (int i = threadIdx.x; i < items; i += kThreads) {
      const int tok = i / outs_cta, j = i - tok * outs_cta;
      const int row = blockIdx.x * outs_cta + j;
      if (row >= I) continue;
      float gate = 0.0f, up = 0.0f;
      for (int k = 0; k < KS; ++k) {
        gate += red[(j >> 4) + k * RT][j & 15][tok];
        up += red[(j >> 4) + half + k * RT][j & 15][tok];
      }
      gate = __bfloat162float(__float2bfloat16_rn(gate));
      up = __bfloat162float(__float2bfloat16_rn(up));
      static_cast<__nv_bfloat16*>(out)[int64_t{tok} * I + row] = __float2bfloat16_rn(silu(gate) * up);
    }
    return;
  }

  const int rows_cta = RT * 16;
  const int row_base = blockIdx.x * rows_cta;
  const int items = rows_cta * T;  // consecutive threads take consecutive rows: coalesced stores
  const bool split = gridDim.y > 1;
  for (int i = threadIdx.x; i < items; i += kThreads) {
    const int tok = i / rows_cta, r = i - tok * rows_cta;
    const int row = row_base + r;
    if (row >= N) continue;
    float sum = 0.0f;
    for (int k = 0; k < KS; ++k) sum += red[(r >> 4) + k * RT][r & 15][tok];
    if (split) {
      ws[(int64_t{blockIdx.y} * T + tok) * N + row] = sum;
    } else {
      store_result<kOutF32>(out, tok, N, row, sum, bias, bias_dt);
    }
  }
  if (!split) return;

  // Split K: the last CTA of this row group to finish sums the partials in split order.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int i = threadIdx.x; i < items; i += kThreads) {
    const int tok = i / rows_cta, r = i - tok * rows_cta;
    const int row = row_base + r;
    if (row >= N) continue;
    float sum = 0.0f;
    for (unsigned y = 0; y < gridDim.y; ++y) sum += __ldcg(ws + (int64_t{y} * T + tok) * N + row);
    store_result<kOutF32>(out, tok, N, row, sum, bias, bias_dt);
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;  // ready for the next launch (stream-ordered)
}

// A device context's gemv state (DeviceContext::op_state): the split-K workspace and the device's shape.
struct GemvState {
  float* ws = nullptr;            // [kWsBytes / 4]
  unsigned* counters = nullptr;   // [kMaxCounters], zero between launches
  int slots = 0;                  // resident CTAs on the device
  int sms = 0;
  bool bulk = false;              // gemv_bulk_kernel runs here (sm_90 code for an sm_90+ device)
  explicit GemvState(int device);
  ~GemvState() {
    cudaFree(counters);
    cudaFree(ws);
  }
  GemvState(const GemvState&) = delete;
  GemvState& operator=(const GemvState&) = delete;
};

template <int kNT, bool kOutF32, bool kSilu>
void allow_bulk_smem() {
  CUDA_CHECK(cudaFuncSetAttribute(gemv_bulk_kernel<kNT, kOutF32, kSilu>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kBulkSmemBytes<kNT> + (kSilu ? kBulkStageMaxBytes : 0))));
}

// Opts every bulk-kernel instance into its shared memory; false when the kernel has no sm_90 code here.
bool setup_bulk(int device) {
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, gemv_bulk_kernel<1, false, false>));
  if (major < 9 || attr.binaryVersion < 90) return false;
  allow_bulk_smem<1, false, false>(), allow_bulk_smem<1, true, false>();
  allow_bulk_smem<1, false, true>(), allow_bulk_smem<1, true, true>();
  allow_bulk_smem<2, false, false>(), allow_bulk_smem<2, true, false>();
  allow_bulk_smem<2, false, true>(), allow_bulk_smem<2, true, true>();
  return true;
}

GemvState::GemvState(int device) {
  CUDA_CHECK(cudaMalloc(&ws, kWsBytes));
  CUDA_CHECK(cudaMalloc(&counters, kMaxCounters * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(counters, 0, kMaxCounters * sizeof(unsigned)));
  int n_sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_kernel<2, true, false>, kThreads, 0));
  slots = std::max(1, n_sms * std::max(1, per_sm));
  sms = std::max(1, n_sms);
  bulk = setup_bulk(device);
}

GemvState& gemv_state(DeviceContext& ctx) {
  return ctx.op_state<GemvState>([&] { return std::make_unique<GemvState>(ctx.device()); });
}

// Stream-K work: warp steps per 16-row tile (ceil(K / 128)) and in all (row tiles x that).
int64_t stream_steps_per_tile(int64_t K) { return (K / 8 + kStepVecs - 1) / kStepVecs; }
int64_t stream_total_steps(int64_t N, int64_t K) { return (N + 15) / 16 * stream_steps_per_tile(K); }

// Stream-K launch with `steps_per_warp` (raised until the fp32 fragment slots fit the workspace).
GemvConfig stream_config(int64_t T, int64_t N, int64_t K, int64_t steps_per_warp) {
  const int64_t total = stream_total_steps(N, K);
  const int64_t slot_bytes = int64_t{T > 8 ? 2 : 1} * 32 * 4 * 4;
  int64_t spw = std::max<int64_t>(1, std::min(steps_per_warp, total));
  while ((total + spw - 1) / spw * 2 * slot_bytes > static_cast<int64_t>(kWsBytes)) ++spw;
  GemvConfig c;
  c.stream_steps = static_cast<int>(spw);
  c.ctas = static_cast<int>(((total + spw - 1) / spw + kWarps - 1) / kWarps);
  return c;
}

// Bulk-copy work: 16-row x 1024-k units per tile and in all.
int64_t bulk_units_per_tile(int64_t K) { return (K / 8 + kBulkUnitVecs - 1) / kBulkUnitVecs; }
int64_t bulk_total_units(int64_t N, int64_t K) { return (N + 15) / 16 * bulk_units_per_tile(K); }

// Appends c unless an identical launch shape is already listed (different tunings can pick the same one).
void add_unique(std::vector<GemvConfig>& out, const GemvConfig& c) {
  if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
}

// forced_rt in {1, 2, 4, 8} / forced_split > 0: that many row tiles per CTA / CTAs along K (tests).
GemvConfig pick_config(int64_t T, int64_t N, int64_t K, int slots, int waves, int forced_rt = 0,
                       int forced_split = 0) {
  const int64_t Kv = K / 8, row_tiles = (N + 15) / 16;
  const int64_t target = int64_t{std::max(1, waves)} * slots;
  GemvConfig c;
  int RT = kWarps;
  while (RT > 1 && (row_tiles + RT - 1) / RT < target) RT /= 2;
  if (forced_rt == 1 || forced_rt == 2 || forced_rt == 4 || forced_rt == 8) RT = forced_rt;
  const int64_t ctas_x = (row_tiles + RT - 1) / RT;
  const int KS = kWarps / RT;
  int64_t split = 1;
  if (ctas_x < target) {
    const int64_t max_split = std::max<int64_t>(1, Kv / (int64_t{KS} * kStepVecs));  // >= 1 full step per warp
    split = std::min<int64_t>({(target + ctas_x - 1) / ctas_x, max_split, kMaxSplit});
  }
  if (forced_split > 0) split = std::min(forced_split, 64);
  while (split > 1 && (split * T * N * 4 > static_cast<int64_t>(kWsBytes) || ctas_x > kMaxCounters)) --split;
  c.rows_tiles_per_cta = RT;
  c.k_split = static_cast<int>(split);
  c.ctas = static_cast<int>(ctas_x * split);
  return c;
}

template <int kNT, bool kOutF32, bool kSilu, bool kSiluOut = false>
void launch(const GemvConfig& c, GemvState& ctx, void* out, const void* in, int64_t in_pitch_elems,
            const void* weight, const void* bias, int bias_dt, int64_t T, int64_t N, int64_t K, ops::Stream st) {
  const int64_t Kv = K / 8;
  if constexpr (kSiluOut) {
    NANOVLLM_CHECK(c.bulk_units == 0 && c.stream_steps == 0 && c.k_split == 1 && c.rows_tiles_per_cta % 2 == 0,
                   "gemv_gate_up_silu (cuda): needs a row-tile launch with an even RT and no K split");
  }
  if (!kSiluOut && c.bulk_units > 0) {
    const int64_t cpt = bulk_units_per_tile(K), total = bulk_total_units(N, K);
    const int64_t ctas = (total + c.bulk_units - 1) / c.bulk_units;
    NANOVLLM_CHECK(ctx.bulk, "gemv (cuda): the bulk-copy kernel needs sm_90 code and device");
    const int64_t stage = kSilu ? T * K * 2 : 0;  // the staged activation
    NANOVLLM_CHECK(stage <= kBulkStageMaxBytes, "gemv_silu (cuda): bulk-copy kernel with T=", T, " K=", K,
                   " (activation over ", kBulkStageMaxBytes, " bytes)");
    NANOVLLM_CHECK(total < (int64_t{1} << 31) && (N + 15) / 16 <= kMaxCounters &&
                       ctas * 2 * kBulkTileFloats<kNT> * 4 <= static_cast<int64_t>(kWsBytes),
                   "gemv (cuda): bulk shape out of range: N=", N, " K=", K, " units/CTA=", c.bulk_units);
    launch_pdl(gemv_bulk_kernel<kNT, kOutF32, kSilu>, dim3(static_cast<unsigned>(ctas)), dim3(kBulkThreads),
               kBulkSmemBytes<kNT> + stage, st, out, static_cast<const uint4*>(in), static_cast<int>(in_pitch_elems / 8),
               static_cast<const uint4*>(weight), bias, bias_dt, static_cast<int>(T), static_cast<int>(N),
               static_cast<int>(Kv), static_cast<int>(cpt), c.bulk_units, static_cast<int>(total), ctx.ws,
               ctx.counters);
    return;
  }
  if (!kSiluOut && c.stream_steps > 0) {
    const int64_t spt = stream_steps_per_tile(K), total = stream_total_steps(N, K);
    NANOVLLM_CHECK(total < (int64_t{1} << 31) && (N + 15) / 16 <= kMaxCounters &&
                       (total + c.stream_steps - 1) / c.stream_steps * 2 * kSlotFloats<kNT> * 4 <=
                           static_cast<int64_t>(kWsBytes),
                   "gemv (cuda): stream-K shape out of range: N=", N, " K=", K, " steps/warp=", c.stream_steps);
    const int64_t warps = (total + c.stream_steps - 1) / c.stream_steps;
    launch_pdl(gemv_stream_kernel<kNT, kOutF32, kSilu>, dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps)),
               dim3(kThreads), 0, st, out, static_cast<const uint4*>(in), static_cast<int>(in_pitch_elems / 8),
               static_cast<const uint4*>(weight), bias, bias_dt, static_cast<int>(T), static_cast<int>(N),
               static_cast<int>(Kv), static_cast<int>(spt), c.stream_steps, static_cast<int>(total), ctx.ws,
               ctx.counters);
    return;
  }
  const int RT = c.rows_tiles_per_cta, KS = kWarps / RT;
  const int64_t groups = int64_t{KS} * c.k_split;
  const int64_t vpg = ((Kv + groups - 1) / groups + 3) / 4 * 4;  // whole quads
  const dim3 grid(static_cast<unsigned>(c.ctas / c.k_split), static_cast<unsigned>(c.k_split));
  // Per-row L2 prefetch cap: the CTA's budget spread over its rows, whole 16-byte vectors.
  const unsigned per_row = kPrefetchCtaBytes / static_cast<unsigned>(RT * 16) / 16u * 16u;
  launch_pdl(gemv_kernel<kNT, kOutF32, kSilu, kSiluOut>, grid, dim3(kThreads), 0, st, out,
             static_cast<const uint4*>(in), static_cast<int>(in_pitch_elems / 8), static_cast<const uint4*>(weight),
             bias, bias_dt, static_cast<int>(T), static_cast<int>(N), static_cast<int>(Kv), RT,
             static_cast<int>(vpg), per_row, ctx.ws, ctx.counters);
}

// in: [T, K] (x) or [T, 2K] (kSilu: gate | up).
template <bool kSilu>
void run(const GemvConfig* cfg, TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s) {
  const int64_t T = in.dim(0), K = weight.dim(1), N = weight.dim(0);
  GemvState& ctx = gemv_state(context_of(s));
  const GemvConfig c = cfg != nullptr ? *cfg : pick_config(T, N, K, ctx.slots, kDefaultWaves);
  const bool has_bias = bias.defined() && bias.numel() > 0 && bias.data() != nullptr;
  const void* b = has_bias ? bias.data() : nullptr;
  const int b_dt = has_bias ? dt(bias) : 0;
  const ops::Stream st = s;
  const bool f32 = out.dtype() == DType::kF32;
  const int64_t pitch = in.dim(1);
  if (T <= 8) {
    if (f32) launch<1, true, kSilu>(c, ctx, out.data(), in.data(), pitch, weight.data(), b, b_dt, T, N, K, st);
    else launch<1, false, kSilu>(c, ctx, out.data(), in.data(), pitch, weight.data(), b, b_dt, T, N, K, st);
  } else {
    if (f32) launch<2, true, kSilu>(c, ctx, out.data(), in.data(), pitch, weight.data(), b, b_dt, T, N, K, st);
    else launch<2, false, kSilu>(c, ctx, out.data(), in.data(), pitch, weight.data(), b, b_dt, T, N, K, st);
  }
}

bool supported_common(TensorView out, TensorView in, TensorView weight, int64_t K) {
  const int64_t T = in.dim(0), N = weight.dim(0);
  return T >= 1 && T <= kGemvMaxTokens && N >= 1 && K >= 8 && K % 8 == 0 && N < (int64_t{1} << 31) / 16 &&
         K < (int64_t{1} << 30) && in.dtype() == DType::kBF16 && weight.dtype() == DType::kBF16 &&
         (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32) && aligned16(in.data()) &&
         aligned16(weight.data());
}

}  // namespace

bool gemv_supported(TensorView out, TensorView in, TensorView weight) {
  return supported_common(out, in, weight, in.dim(1));
}

bool gemv_silu_supported(TensorView out, TensorView gate_up, TensorView weight) {
  return gate_up.dim(1) == 2 * weight.dim(1) && supported_common(out, gate_up, weight, weight.dim(1));
}

bool gemv_gate_up_silu_supported(TensorView act, TensorView in, TensorView weight) {
  const int64_t I = act.dim(1);
  return act.dtype() == DType::kBF16 && act.dim(0) == in.dim(0) && weight.dim(0) == 2 * I && I % 16 == 0 &&
         weight.dim(1) == in.dim(1) && supported_common(act, in, weight, in.dim(1));
}

std::vector<GemvConfig> gemv_gate_up_silu_candidates(int64_t N) {
  std::vector<GemvConfig> out;
  for (const int RT : {8, 4, 2}) {
    GemvConfig c;
    c.rows_tiles_per_cta = RT;
    c.ctas = static_cast<int>(((N + 15) / 16 + RT - 1) / RT);
    out.push_back(c);
  }
  return out;
}

GemvConfig gemv_config(int64_t T, int64_t N, int64_t K, DeviceContext& ctx) {
  return pick_config(T, N, K, gemv_state(ctx).slots, kDefaultWaves);
}

GemvConfig gemv_forced_config(int64_t T, int64_t N, int64_t K, DeviceContext& ctx, int row_tiles, int k_split) {
  return pick_config(T, N, K, gemv_state(ctx).slots, kDefaultWaves, row_tiles, k_split);
}

GemvConfig gemv_stream_config(int64_t T, int64_t N, int64_t K, int64_t steps_per_warp) {
  return stream_config(T, N, K, steps_per_warp);
}

std::vector<GemvConfig> gemv_candidates(int64_t T, int64_t N, int64_t K, DeviceContext& ctx, bool silu,
                                        bool one_per_sm) {
  // One CTA per SM for a projection the decode attention follows (ops::LinearHint::kBeforeAttention):
  // the bulk-copy kernel's one-wave shape leaves each SM room for an attention CTA, which then starts
  // its KV copies during the projection. Measured on the H200 (CudaDecodePdlBench.DISABLED_LayerTimeline;
  // docs/experiments.md, "The projection before the attention (qkv) at one CTA per SM"): the 0.6B qkv
  // takes 1.1 us longer alone (128 instead of 256 CTAs), the attention after it 2.3 us less, the layer
  // 29.0 -> 27.6-28.1 us; bs=1 0.6B 0.952-0.954 -> 0.919-0.922 ms/token.
  const GemvState& st = gemv_state(ctx);
  const bool bulk = st.bulk && N * K * 2 < kBulkMaxBytes && (!silu || T * K * 2 <= kBulkStageMaxBytes);
  const int64_t units = bulk_total_units(N, K), sms = st.sms;
  auto bulk_per_sm = [&](int64_t per_sm) {
    return gemv_bulk_config(N, K, (units + per_sm * sms - 1) / (per_sm * sms));
  };
  if (one_per_sm && bulk) return {bulk_per_sm(1)};
  int slots = st.slots;
  const bool capped = N * K * 2 >= kCapMinBytes;
  if (capped) slots = std::max(1, slots / 2);  // slots: 2 resident CTAs per SM
  std::vector<GemvConfig> out;
  for (const int waves : {1, 2, 4, 8}) {
    if (capped && waves > 1) break;
    add_unique(out, pick_config(T, N, K, slots, waves));
  }
  // Stream-K: the fewest steps per warp that keep every warp of one wave busy, and 2x / 4x that.
  const int64_t total = stream_total_steps(N, K);
  const int64_t one_wave = std::max<int64_t>(1, (total + int64_t{slots} * kWarps - 1) / (int64_t{slots} * kWarps));
  for (const int64_t f : {1, 2, 4}) add_unique(out, stream_config(T, N, K, one_wave * f));
  // Bulk copies: one and two CTAs per SM for weights under kCapMinBytes, one per SM up to kBulkMaxBytes.
  // Measured on the H200 in Qwen3-8B decode (each comparison on one machine, 2-3 runs per side):
  //  * with two per SM offered for every 8B shape the dispatch picked it for gate_up (201 MB) and decode
  //    went 4.67-4.70 -> 4.99 ms/token, although the kernel was as fast as cuBLASLt alone. Not profiled;
  //    the likely cause is ~210 KB of shared memory per SM keeping the neighbours' CTAs off the SM;
  //  * one per SM for qkv and o (50 and 34 MB): picked for both, 4.73-4.78 -> 4.67-4.68 ms/token (the decode
  //    layer 120.3 -> 118.4 us);
  //  * one per SM up to 256 MiB (also down and gate_up): no further gain (4.67-4.69 vs 4.68-4.73 ms).
  if (bulk) {
    for (const int64_t per_sm : {1, 2}) {
      if (per_sm > 1 && N * K * 2 >= kCapMinBytes) break;
      add_unique(out, bulk_per_sm(per_sm));
    }
    // Whole 16-row tiles per CTA where a tile's units fit the ring (K <= 3072): no K split across CTAs (no
    // partials, fence and last-CTA sum after the products), and all of the CTA's weights are requested
    // before the wait. Fewer CTAs (64 for the Qwen3-0.6B o and down projections), each streaming more,
    // but at these sizes the chain after the wait is what costs: the dispatch picks it for o (2.75 us
    // vs 3.58) and down; bs=1 0.6B 0.919-0.922 -> 0.887-0.889 ms/token (H200, same call; docs/experiments.md,
    // "Whole 16-row tiles per CTA").
    const int64_t cpt = bulk_units_per_tile(K);
    if (cpt > 1 && cpt <= kBulkStages) add_unique(out, gemv_bulk_config(N, K, cpt));
  }
  return out;
}

GemvConfig gemv_bulk_config(int64_t N, int64_t K, int64_t units_per_cta) {
  const int64_t total = bulk_total_units(N, K);
  int64_t upc = std::max<int64_t>(1, std::min(units_per_cta, total));
  while ((total + upc - 1) / upc * 2 * kBulkTileFloats<2> * 4 > static_cast<int64_t>(kWsBytes)) ++upc;
  GemvConfig c;
  c.bulk_units = static_cast<int>(upc);
  c.ctas = static_cast<int>((total + upc - 1) / upc);
  return c;
}

bool gemv_bulk_available(DeviceContext& ctx) { return gemv_state(ctx).bulk; }

GemvSplitWorkspace gemv_split_workspace(DeviceContext& ctx) {
  GemvState& st = gemv_state(ctx);
  return {st.ws, kWsBytes, st.counters, kMaxCounters};
}

void gemv(TensorView out, TensorView in, TensorView weight, TensorView bias, ops::Stream s, const GemvConfig* cfg) {
  NANOVLLM_CHECK(gemv_supported(out, in, weight), "gemv (cuda): unsupported tensors: in ", in.shape().str(), " ",
                 dtype_name(in.dtype()), ", weight ", weight.shape().str(), " ", dtype_name(weight.dtype()), ", out ",
                 dtype_name(out.dtype()));
  run<false>(cfg, out, in, weight, bias, s);
}

void gemv_gate_up_silu(TensorView act, TensorView in, TensorView weight, ops::Stream s, const GemvConfig* cfg) {
  NANOVLLM_CHECK(gemv_gate_up_silu_supported(act, in, weight), "gemv_gate_up_silu (cuda): unsupported tensors: in ",
                 in.shape().str(), " ", dtype_name(in.dtype()), ", weight ", weight.shape().str(), " ",
                 dtype_name(weight.dtype()), ", act ", act.shape().str(), " ", dtype_name(act.dtype()));
  const int64_t T = in.dim(0), N = weight.dim(0), K = weight.dim(1);
  GemvState& ctx = gemv_state(context_of(s));
  const GemvConfig c = cfg != nullptr ? *cfg : gemv_gate_up_silu_candidates(N).front();
  const ops::Stream st = s;
  if (T <= 8) launch<1, false, false, true>(c, ctx, act.data(), in.data(), K, weight.data(), nullptr, 0, T, N, K, st);
  else launch<2, false, false, true>(c, ctx, act.data(), in.data(), K, weight.data(), nullptr, 0, T, N, K, st);
}

void gemv_silu(TensorView out, TensorView gate_up, TensorView weight, ops::Stream s, const GemvConfig* cfg) {
  NANOVLLM_CHECK(gemv_silu_supported(out, gate_up, weight), "gemv_silu (cuda): unsupported tensors: gate_up ",
                 gate_up.shape().str(), " ", dtype_name(gate_up.dtype()), ", weight ", weight.shape().str(), " ",
                 dtype_name(weight.dtype()), ", out ", dtype_name(out.dtype()));
  run<true>(cfg, out, gate_up, weight, TensorView(), s);
}

}  // namespace nanovllm::cuda_ops
