// Persistent decode kernel (see persistent_decode.h for why). One CTA per SM, cooperative launch.
//
// CTA roles: 8 consumer warps run the phases; 1 producer warp streams weights.
//
// Weight stream. Every matrix of a layer is split by rows into G contiguous slices (CTA c: rows
// [N c / G, N (c + 1) / G)), so a CTA's slice is one contiguous byte range. The producer walks the
// CTA's slices in the order the phases consume them (qkv, o, gate, up, down; layer after layer) and
// copies pieces of whole rows (<= 24 KB) into a ring of kSlots shared-memory slots (cp.async.bulk,
// mbarrier full / empty per slot). It waits only for free slots, never for activations.
//
// Phases of a layer (each ends with a grid barrier; numerics as the layer loop's kernels: fp32 math,
// bf16 wherever the loop stores bf16):
//   A  x = rmsnorm(residual) (every CTA, redundantly: H elements); qkv rows of the CTA's slice.
//   C  attention split-KV: unit (kv head h, split s) per CTA. Its warps stage their keys' K/V rows in
//      shared memory (cp.async) *before* phase A's barrier (old keys do not depend on this step), then
//      q/k norm + RoPE of the group's heads, the new key's K/V stored to the cache by the unit that
//      owns it, online softmax over the keys, the 8 warps merged, partial (o, lse) written; the last
//      split of the kv head to finish (arrival counter) merges the S partials into the attention output.
//   E  o rows: residual[j] += o_j. o and down share the H-row partition, so each CTA owns its rows of
//      the residual stream and keeps them in shared memory too.
//   F  x = rmsnorm(residual); gate rows then up rows of the slice: act_j = silu(gate_j) * up_j.
//   G  down rows: residual[j] += down_j; the last layer writes hidden[j] = down_j instead (the layer
//      loop's hand-over to head()).
// Data written inside the kernel by other CTAs is read with ld.global.cg (L1 is not coherent).
//
// Where the time goes (H200, context 1024; the DISABLED_ benchmark's trace and
// bench/results/2026-11-24-h200-cuda-perf-session10.md): Qwen3-0.6B ~33 us per layer, the same as the
// layer loop then (session 11 took the loop to ~28-29 us, -session11.md); Qwen3-8B ~154 vs ~121 (now
// ~115). Five grid barriers cost ~11 us per 0.6B layer. The weight phases
// do not wait for the stream (the pieces are in shared memory when the consumers reach them; with the
// weights L2-resident the times are the same): the cost is the consumers walking each piece together,
// ~1,700 cycles per piece whatever the math. Whole pieces per warp made the 8B 136 us per layer but
// the 0.6B slower; tensor-core consumers, L2 prefetch of the stream and smaller pieces were slower.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "nanovllm/kernels/cuda/bulk_copy.cuh"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/persistent_decode.h"

namespace nanovllm::cuda_ops {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kConsumerWarps = 8;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreads = kConsumers + 32;  // + the producer warp
constexpr int kSlots = 6;
constexpr int kSlotBytes = 24 * 1024;       // a piece: whole rows; rows of up to 12,288 bf16
constexpr int kMaxK = kSlotBytes / 2;
constexpr int kCopyBytes = 2048;            // one bulk copy
constexpr int kXBytes = 24 * 1024;          // phase input vector (bf16), or the attention scratch
constexpr int kMaxCtaRows = 192;            // rows of a CTA's slice (partial sums, gate results, residual)
constexpr int kMinSplitKeys = 16;
constexpr int kKvStageBytes = 32 * 1024;    // every warp's batch of K/V rows (cp.async staging)
// Keys per warp staged together (8 warps x batch x (K + V) x D bf16 fit the staging area; at most 8:
// the batch's scores live in registers).
template <int D>
constexpr int key_batch() {
  return kKvStageBytes / (kConsumerWarps * 2 * D * 2) < 8 ? kKvStageBytes / (kConsumerWarps * 2 * D * 2) : 8;
}
constexpr size_t kSmemBytes = size_t{kSlots} * kSlotBytes + kXBytes + kKvStageBytes + kMaxCtaRows * 4 +
                              size_t{kMaxCtaRows} * kConsumerWarps * 4 + kMaxCtaRows * 4 + 32 * 4 + 256 * 4 + 2 * kSlots * 8;

struct LayerPtrs {
  const bf16 *in_norm, *qkv, *q_norm, *k_norm, *o, *post_norm, *gate_up, *down;
  bf16 *k_cache, *v_cache;
};

struct Params {
  const LayerPtrs* layers;
  int num_layers;
  bf16* hidden;    // [H]
  bf16* residual;  // [H]
  bf16* qkv;       // [(Hq + 2 Hk) D] scratch
  bf16* attn;      // [Hq D] scratch
  bf16* act;       // [I] scratch
  float* part_o;   // [Hq, s_max, D]
  float* part_lse; // [Hq, s_max] (log2 domain, scale folded in)
  unsigned* bar;   // [2]: barrier arrivals, exits (zero between launches)
  unsigned* head_count;  // [Hk]: attention splits done per kv head (zero between phases)
  unsigned long long* trace;  // null, or CTA 0's phase trace (see PersistentDecoder::set_trace)
  const int32_t* positions;
  const int32_t* context_lens;
  const int32_t* block_table;
  const int32_t* slot_mapping;
  const float* inv_freq;
  float rope_scaling;
  int H, Hq, Hk, I, block_size, s_max;
  float eps, scale_log2;
};

// ---- CTA-level helpers (consumer warps only: the producer never joins bar 1) ----

__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory"); }

__device__ __forceinline__ float consumer_sum(float v, float* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  consumer_sync();
  float s = 0.0f;
#pragma unroll
  for (int w = 0; w < kConsumerWarps; ++w) s += red[w];
  consumer_sync();  // red is free again
  return s;
}

__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Grid barrier number `index` (0, 1, ...): returns once all G CTAs have arrived at it. The counter only
// grows during a launch; the last CTA to exit resets it (see the kernel's end).
__device__ __forceinline__ void grid_sync(unsigned* count, unsigned& index) {
  consumer_sync();
  ++index;
  if (threadIdx.x == 0) {
    // Release: this CTA's writes (ordered before by the bar.sync above) are visible before the arrival.
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(count) : "memory");
    const unsigned target = index * gridDim.x;
    // Relaxed polls (an acquire load invalidates L1 on every poll), one acquire fence after.
    while (ld_relaxed(count) < target) {
    }
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
  consumer_sync();
}

__device__ __forceinline__ float bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// ---- The weight stream: matrix m of a layer, the CTA's row slice ----

struct Slice {
  const bf16* w;  // row-major [N, K]
  int64_t r0, r1;
  int K;
};

__device__ __forceinline__ Slice layer_slice(const Params& p, const LayerPtrs& L, int m, int D) {
  const int64_t G = gridDim.x, c = blockIdx.x;
  const bf16* w = m == 0 ? L.qkv : m == 1 ? L.o : m == 4 ? L.down : L.gate_up;
  const int64_t n = m == 0 ? int64_t{p.Hq + 2 * p.Hk} * D : (m == 2 || m == 3) ? p.I : p.H;
  const int64_t off = m == 3 ? p.I : 0;  // up rows follow the gate rows
  const int K = m == 1 ? p.Hq * D : m == 4 ? p.I : p.H;
  return {w, off + n * c / G, off + n * (c + 1) / G, K};
}
constexpr int kMatsPerLayer = 5;

__device__ __forceinline__ int rows_per_piece(int K) { return kSlotBytes / (2 * K); }

// Walks the CTA's pieces of every layer in consumption order (empty slices skipped).
struct PieceCursor {
  int l = 0, m = 0, D = 0;
  int64_t r = 0;
  Slice s{};
  bool done = false;

  __device__ void start(const Params& p, int head_dim) {
    D = head_dim;
    s = layer_slice(p, p.layers[0], 0, D);
    r = s.r0;
    skip_empty(p);
  }
  __device__ void skip_empty(const Params& p) {
    while (!done && r >= s.r1) {
      if (++m == kMatsPerLayer) {
        m = 0;
        if (++l == p.num_layers) {
          done = true;
          return;
        }
      }
      s = layer_slice(p, p.layers[l], m, D);
      r = s.r0;
    }
  }
  __device__ int rows() const {
    const int rpp = rows_per_piece(s.K);
    return static_cast<int>(s.r1 - r < rpp ? s.r1 - r : rpp);
  }
  __device__ const bf16* src() const { return s.w + r * s.K; }
  __device__ unsigned bytes() const { return static_cast<unsigned>(rows()) * static_cast<unsigned>(s.K) * 2u; }
  __device__ void advance(const Params& p) {
    r += rows_per_piece(s.K);
    skip_empty(p);
  }
};

// Producer warp: every piece into the ring. Lane 0 waits for the slot and arms its barrier; then the
// lanes copy the piece in kCopyBytes chunks: many concurrent bulk copies per SM stream faster than one
// large one (as in gemv_bulk.cuh).
__device__ void produce(const Params& p, int D, unsigned char* ring, uint64_t* full, uint64_t* empty) {
  const int lane = threadIdx.x & 31;
  PieceCursor cur;
  cur.start(p, D);
  for (uint32_t i = 0; !cur.done; ++i) {
    const int slot = static_cast<int>(i % kSlots);
    const unsigned bytes = cur.bytes();
    if (lane == 0) {
      if (i >= kSlots) mbar_wait(&empty[slot], ((i / kSlots) - 1) & 1u);  // its previous piece is consumed
      fence_proxy_async_smem();
      mbar_arrive_expect_tx(&full[slot], bytes);
    }
    __syncwarp();
    const unsigned char* src = reinterpret_cast<const unsigned char*>(cur.src());
    for (unsigned off = static_cast<unsigned>(lane) * kCopyBytes; off < bytes; off += 32u * kCopyBytes)
      bulk_copy_g2s(ring + slot * kSlotBytes + off, src + off, min(static_cast<unsigned>(kCopyBytes), bytes - off), &full[slot]);
    cur.advance(p);
  }
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Consumers: out_j = W[j, :] . x for the CTA's rows of slice s (x: K bf16 in shared memory). A piece of
// n rows is cut into n x P tasks (P = max(1, 8 / n) K-parts per row, so pieces of 1-3 long rows still
// keep every warp busy); a warp sums a task's vectors and stores the partial in `partial` [row][part].
// After the slice, thread t sums row t's parts in order (deterministic) and calls result(j, sum).
// (Measured on the H200 and not kept: x held in registers, and loading a warp's rows into registers to
// release the slot before the math: both slower, the latter spills at the 168-register cap that 9 warps
// per SM impose.)
__device__ __forceinline__ int parts_per_row(int n) { return n >= kConsumerWarps ? 1 : kConsumerWarps / n; }

template <class Result>
__device__ __forceinline__ void consume(const Slice& s, const unsigned char* ring, uint64_t* full, uint64_t* empty,
                                        uint32_t& i, const bf16* xs, float* partial, unsigned long long* wait_cycles,
                                        Result&& result) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rpp = rows_per_piece(s.K), kv = s.K / 8;
  const int rows = static_cast<int>(s.r1 - s.r0);
  const uint4* x4 = reinterpret_cast<const uint4*>(xs);
  for (int r = 0; r < rows; r += rpp) {
    const int n = rows - r < rpp ? rows - r : rpp;
    const int P = parts_per_row(n), per = (kv + P - 1) / P;
    const int slot = static_cast<int>(i % kSlots);
    const long long t0 = wait_cycles != nullptr ? clock64() : 0;
    mbar_wait(&full[slot], (i / kSlots) & 1u);
    if (wait_cycles != nullptr) *wait_cycles += static_cast<unsigned long long>(clock64() - t0);
    const uint4* base = reinterpret_cast<const uint4*>(ring + slot * kSlotBytes);
    for (int task = warp; task < n * P; task += kConsumerWarps) {
      const int row = task / P, part = task - row * P;
      const int v1 = min(kv, (part + 1) * per);
      const uint4* wr = base + row * kv;
      float a0 = 0.0f, a1 = 0.0f;
      int c = part * per + lane;
      for (; c + 32 < v1; c += 64) {
        a0 += dot8(wr[c], x4[c]);
        a1 += dot8(wr[c + 32], x4[c + 32]);
      }
      if (c < v1) a0 += dot8(wr[c], x4[c]);
      const float sum = warp_sum(a0 + a1);
      if (lane == 0) partial[(r + row) * kConsumerWarps + part] = sum;
    }
    // One arrival per warp: 256 arrivals on one barrier serialise (measured: ~1.2 us per 24 KB piece).
    // The lanes' slot reads have all been consumed by the sums above, and __syncwarp orders them
    // before lane 0's release.
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);
    ++i;
  }
  consumer_sync();
  for (int row = threadIdx.x; row < rows; row += kConsumers) {
    const int first = row - row % rpp;
    const int P = parts_per_row(rows - first < rpp ? rows - first : rpp);
    float sum = 0.0f;
    for (int part = 0; part < P; ++part) sum += partial[row * kConsumerWarps + part];
    result(s.r0 + row, sum);
  }
  consumer_sync();  // partial is free again; the results are visible to every consumer
}

// xs[0, n) = src[0, n) (bf16, n % 8 == 0), then a consumer barrier.
__device__ __forceinline__ void load_vector(bf16* xs, const bf16* src, int n) {
  for (int c = threadIdx.x; c < n / 8; c += kConsumers)
    reinterpret_cast<uint4*>(xs)[c] = __ldcg(reinterpret_cast<const uint4*>(src) + c);
  consumer_sync();
}

// xs = bf16(w * (v * rsqrt(mean(v^2) + eps))) with v the residual stream (layer 0: the embedding in
// `hidden`, which the layer loop copies into the residual). The weight and the row are loaded together
// (both in flight at once: a phase's first latency).
__device__ void norm_to_x(const Params& p, bool from_hidden, const bf16* w, bf16* xs, float* red) {
  constexpr int kMaxC = (kMaxK / 8 + kConsumers - 1) / kConsumers;
  const int chunks = p.H / 8;
  const uint4* src = reinterpret_cast<const uint4*>(from_hidden ? p.hidden : p.residual);
  uint4 wv[kMaxC], xv[kMaxC];
#pragma unroll
  for (int k = 0; k < kMaxC; ++k) {
    const int c = threadIdx.x + k * kConsumers;
    if (c < chunks) {
      wv[k] = __ldg(reinterpret_cast<const uint4*>(w) + c);
      xv[k] = __ldcg(src + c);
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxC; ++k) {
    if (threadIdx.x + k * kConsumers < chunks) {
      float v[8];
      bf16x8_to_f32(xv[k], v);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
    }
  }
  const float r = rsqrtf(consumer_sum(ss, red) / static_cast<float>(p.H) + p.eps);
#pragma unroll
  for (int k = 0; k < kMaxC; ++k) {
    const int c = threadIdx.x + k * kConsumers;
    if (c < chunks) {
      float v[8], wf[8];
      bf16x8_to_f32(xv[k], v);
      bf16x8_to_f32(wv[k], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = wf[e] * (v[e] * r);
      reinterpret_cast<uint4*>(xs)[c] = f32_to_bf16x8(v);
    }
  }
  consumer_sync();
}

// ---- Attention ----

template <int E>
struct LaneVec;  // a lane's E = D / 32 consecutive bf16 of a K or V row
template <>
struct LaneVec<2> { using T = uint32_t; };
template <>
struct LaneVec<4> { using T = uint2; };
template <>
struct LaneVec<8> { using T = uint4; };

template <int E>
__device__ __forceinline__ void lane_to_f32(const typename LaneVec<E>::T& v, float (&f)[E]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < E / 2; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ int num_splits(int ctx, int s_max) {
  return max(1, min(s_max, (ctx + kMinSplitKeys - 1) / kMinSplitKeys));
}

// The unit's key range for this CTA (unit = blockIdx.x; CTAs past the units have none).
struct Unit {
  bool active;
  int h, s, kb, ke;
  int S;  // splits per kv head this step
};
__device__ __forceinline__ Unit my_unit(const Params& p, int ctx) {
  const int S = num_splits(ctx, p.s_max);
  const int u = blockIdx.x;
  Unit un{u < p.Hk * S, 0, 0, 0, 0, S};
  if (!un.active) return un;
  un.h = u / S;
  un.s = u % S;
  const int per = (ctx + S - 1) / S;
  un.kb = min(ctx, un.s * per);
  un.ke = min(ctx, un.kb + per);
  return un;
}

// Cache slots of a warp's batch of keys k0 + 8 j (-1 past ke): the block table is the same for every
// layer, so the first batch's slots are looked up once per launch.
template <int D>
struct KeyRows {
  int32_t slot[key_batch<D>()];
};

template <int D>
__device__ __forceinline__ KeyRows<D> key_rows(const Params& p, int k0, int ke) {
  KeyRows<D> r;
#pragma unroll
  for (int j = 0; j < key_batch<D>(); ++j) {
    const int key = k0 + j * kConsumerWarps;
    r.slot[j] = key < ke ? __ldg(p.block_table + key / p.block_size) * p.block_size + key % p.block_size : -1;
  }
  return r;
}

// The warp's K/V rows of kv head h for the batch's keys into its staging area [batch][K | V][D]
// (cp.async, zero-filled past ke; no registers held, so the copies can be in flight across a grid
// barrier). The caller waits (cp_async_wait<0> + __syncwarp) before reading.
template <int D>
__device__ __forceinline__ void stage_keys(const LayerPtrs& L, int Hk, int h, const KeyRows<D>& r, bf16* stage) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < key_batch<D>(); ++j) {
    for (int c = lane; c < 2 * kChunks; c += 32) {
      const int is_v = c / kChunks, ch = c - is_v * kChunks;
      const bool valid = r.slot[j] >= 0;
      const int64_t off = valid ? (int64_t{r.slot[j]} * Hk + h) * D + ch * 8 : 0;
      cp_async16_zfill(smem_u32(stage + (j * 2 + is_v) * D + ch * 8), (is_v ? L.v_cache : L.k_cache) + off, valid);
    }
  }
  cp_async_commit();
}

// q/k: RMSNorm over D (when the weight is present) and RoPE at `pos`; v as is. Values rounded to bf16
// (what qkv_prologue stores). Warp-wide: lane holds pairs (j, j + D/2), j = lane + 32 t.
// rope_cs: [D/2] cos, [D/2] sin of this step's position (times the attention scaling), or null (v).
template <int D>
__device__ __forceinline__ void prologue_head(const Params& p, const bf16* src, const bf16* norm_w,
                                              const float* rope_cs, float* dst_f32, bf16* dst_cache) {
  constexpr int P = (D / 2 + 31) / 32;
  const int lane = threadIdx.x & 31;
  float x1[P], x2[P];
  float ss = 0.0f;
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int j = lane + 32 * t;
    x1[t] = x2[t] = 0.0f;
    if (j < D / 2) {
      x1[t] = __bfloat162float(__ldcg(src + j));
      x2[t] = __bfloat162float(__ldcg(src + j + D / 2));
      ss += x1[t] * x1[t] + x2[t] * x2[t];
    }
  }
  if (norm_w != nullptr) {
    const float r = rsqrtf(warp_sum(ss) / static_cast<float>(D) + p.eps);
#pragma unroll
    for (int t = 0; t < P; ++t) {
      const int j = lane + 32 * t;
      if (j < D / 2) {
        x1[t] = __bfloat162float(norm_w[j]) * (x1[t] * r);
        x2[t] = __bfloat162float(norm_w[j + D / 2]) * (x2[t] * r);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int j = lane + 32 * t;
    if (j >= D / 2) continue;
    if (rope_cs != nullptr) {
      const float cn = rope_cs[j], sn = rope_cs[D / 2 + j];
      const float a = x1[t], b = x2[t];
      x1[t] = a * cn - b * sn;
      x2[t] = b * cn + a * sn;
    }
    const bf16 b1 = __float2bfloat16_rn(x1[t]), b2 = __float2bfloat16_rn(x2[t]);
    dst_f32[j] = __bfloat162float(b1);
    dst_f32[j + D / 2] = __bfloat162float(b2);
    if (dst_cache != nullptr) {
      dst_cache[j] = b1;
      dst_cache[j + D / 2] = b2;
    }
  }
}

// Phase C for the CTA's unit; `stage` (this warp's) holds the first key batch, staged before the barrier.
template <int D, int kG>
__device__ void attention_unit(const Params& p, const LayerPtrs& L, const Unit& un, int ctx, bf16* stage,
                               const float* rope_cs, float* scratch) {
  constexpr int E = D / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = p.Hq / p.Hk;
  float* qs = scratch;              // [g][D]
  float* kn = qs + g * D;           // [D] the new key (normed, rotated)
  float* vn = kn + D;               // [D] the new value
  float* merge = vn + D;            // [warps][g][D + 2]
  const bool has_new = un.kb <= ctx - 1 && ctx - 1 < un.ke;
  const int64_t slot = p.slot_mapping[0];
  const int items = g + (has_new ? 2 : 0);
  for (int it = warp; it < items; it += kConsumerWarps) {
    if (it < g) {
      const int head = un.h * g + it;
      prologue_head<D>(p, p.qkv + int64_t{head} * D, L.q_norm, rope_cs, qs + it * D, nullptr);
    } else {
      const bool is_k = it == g;
      const bf16* src = p.qkv + int64_t{p.Hq + (is_k ? 0 : p.Hk) + un.h} * D;
      bf16* cache = slot < 0 ? nullptr : (is_k ? L.k_cache : L.v_cache) + (slot * p.Hk + un.h) * D;
      prologue_head<D>(p, src, is_k ? L.k_norm : nullptr, is_k ? rope_cs : nullptr, is_k ? kn : vn, cache);
    }
  }
  consumer_sync();

  float q[kG][E], m[kG], l[kG], acc[kG][E];
#pragma unroll
  for (int i = 0; i < kG; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      q[i][e] = i < g ? qs[i * D + lane * E + e] * p.scale_log2 : 0.0f;
      acc[i][e] = 0.0f;
    }
  }
  // Per batch of kKeyBatch keys: all scores first (independent warp reductions), then one online-softmax
  // update per head.
  constexpr int kKeyBatch = key_batch<D>();
  for (int k0 = un.kb + warp; k0 < un.ke; k0 += kKeyBatch * kConsumerWarps) {
    if (k0 != un.kb + warp) {  // later batches (long contexts)
      __syncwarp();            // every lane is done with the previous batch
      stage_keys<D>(L, p.Hk, un.h, key_rows<D>(p, k0, un.ke), stage);
    }
    cp_async_wait<0>();
    __syncwarp();
    float sc[kKeyBatch][kG];
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      float kf[E];
      if (k0 + j * kConsumerWarps == ctx - 1) {
#pragma unroll
        for (int e = 0; e < E; ++e) kf[e] = kn[lane * E + e];
      } else {
        lane_to_f32<E>(*reinterpret_cast<const typename LaneVec<E>::T*>(stage + (j * 2) * D + lane * E), kf);
      }
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        sc[j][i] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) sc[j][i] = fmaf(q[i][e], kf[e], sc[j][i]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int j = 0; j < kKeyBatch; ++j)
#pragma unroll
        for (int i = 0; i < kG; ++i) sc[j][i] += __shfl_xor_sync(0xffffffffu, sc[j][i], o);
    float pr[kKeyBatch][kG];
#pragma unroll
    for (int i = 0; i < kG; ++i) {
      float mx = m[i];
#pragma unroll
      for (int j = 0; j < kKeyBatch; ++j)
        if (k0 + j * kConsumerWarps < un.ke) mx = fmaxf(mx, sc[j][i]);
      const float alpha = exp2f(m[i] - mx);
      m[i] = mx;
      float psum = 0.0f;
#pragma unroll
      for (int j = 0; j < kKeyBatch; ++j) {
        pr[j][i] = k0 + j * kConsumerWarps < un.ke ? exp2f(sc[j][i] - mx) : 0.0f;
        psum += pr[j][i];
      }
      l[i] = l[i] * alpha + psum;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[i][e] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < kKeyBatch; ++j) {
      if (k0 + j * kConsumerWarps >= un.ke) break;  // past the range: registers hold no row (0 * NaN)
      float vf[E];
      if (k0 + j * kConsumerWarps == ctx - 1) {
#pragma unroll
        for (int e = 0; e < E; ++e) vf[e] = vn[lane * E + e];
      } else {
        lane_to_f32<E>(*reinterpret_cast<const typename LaneVec<E>::T*>(stage + (j * 2 + 1) * D + lane * E), vf);
      }
#pragma unroll
      for (int i = 0; i < kG; ++i)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[i][e] = fmaf(pr[j][i], vf[e], acc[i][e]);
    }
  }

  // Merge the warps: [warp][i][D] acc, then m, l.
#pragma unroll
  for (int i = 0; i < kG; ++i) {
    if (i >= g) break;
    float* mine = merge + (warp * g + i) * (D + 2);
#pragma unroll
    for (int e = 0; e < E; ++e) mine[lane * E + e] = acc[i][e];
    if (lane == 0) {
      mine[D] = m[i];
      mine[D + 1] = l[i];
    }
  }
  consumer_sync();
  for (int e = threadIdx.x; e < g * D; e += kConsumers) {
    const int i = e / D, d = e % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) mx = fmaxf(mx, merge[(w * g + i) * (D + 2) + D]);
    float lsum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) {
      const float* src = merge + (w * g + i) * (D + 2);
      const float sc = src[D] == -INFINITY ? 0.0f : exp2f(src[D] - mx);
      lsum += src[D + 1] * sc;
      o += src[d] * sc;
    }
    const int64_t part = int64_t{un.h * g + i} * p.s_max + un.s;
    p.part_o[part * D + d] = lsum > 0.0f ? o / lsum : 0.0f;
    if (d == 0) p.part_lse[part] = lsum > 0.0f ? mx + log2f(lsum) : -INFINITY;
  }

  // The last split of this kv head to finish merges the group's S partials (weights 2^lse) into attn.
  __threadfence();  // this CTA's partials are visible device-wide before its arrival is counted
  consumer_sync();
  int* is_last = reinterpret_cast<int*>(merge);
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(p.head_count + un.h, 1u);
    *is_last = prev == static_cast<unsigned>(un.S) - 1u;
    if (*is_last) p.head_count[un.h] = 0;  // ready for the next layer (a grid barrier comes first)
  }
  consumer_sync();
  if (!*is_last) return;
  __threadfence();
  // Split weights 2^(lse_s - max) once per head (not per element), in the now unused merge scratch:
  // sw [g][S], swsum [g]. Then every element's S partial loads are independent, so they are in flight
  // together.
  float* sw = merge + 4;  // past is_last
  float* swsum = sw + g * un.S;
  for (int e = threadIdx.x; e < g * un.S; e += kConsumers)
    sw[e] = __ldcg(p.part_lse + int64_t{un.h * g + e / un.S} * p.s_max + e % un.S);
  consumer_sync();
  if (threadIdx.x < g) {
    float* w = sw + threadIdx.x * un.S;
    float mx = -INFINITY;
    for (int s = 0; s < un.S; ++s) mx = fmaxf(mx, w[s]);
    float wsum = 0.0f;
    for (int s = 0; s < un.S; ++s) {
      w[s] = w[s] == -INFINITY ? 0.0f : exp2f(w[s] - mx);
      wsum += w[s];
    }
    swsum[threadIdx.x] = wsum;
  }
  consumer_sync();
  for (int e = threadIdx.x; e < g * D; e += kConsumers) {
    const int i = e / D, d = e % D;
    const int64_t head = int64_t{un.h} * g + i;
    const float* po = p.part_o + head * p.s_max * D + d;
    const float* w = sw + i * un.S;
    float o = 0.0f;
#pragma unroll 8
    for (int s = 0; s < un.S; ++s) o += w[s] * __ldcg(po + int64_t{s} * D);
    p.attn[head * D + d] = __float2bfloat16_rn(swsum[i] > 0.0f ? o / swsum[i] : 0.0f);
  }
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }


// kG: the GQA group rounded up to a power of two (padding heads have zero queries and are never written).
template <int D, int kG>
__global__ void __launch_bounds__(kThreads, 1) persistent_decode_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;                                                    // [kSlots][kSlotBytes]
  bf16* xs = reinterpret_cast<bf16*>(smem + kSlots * kSlotBytes);                // [kXBytes / 2]
  bf16* kv_stage = reinterpret_cast<bf16*>(smem + kSlots * kSlotBytes + kXBytes);  // [warps][batch][2][D]
  float* gate_s = reinterpret_cast<float*>(smem + kSlots * kSlotBytes + kXBytes + kKvStageBytes);  // [kMaxCtaRows]
  float* partial = gate_s + kMaxCtaRows;                                         // [kMaxCtaRows][warps]
  float* res_s = partial + kMaxCtaRows * kConsumerWarps;                         // [kMaxCtaRows]
  float* red = res_s + kMaxCtaRows;                                              // [32]
  float* rope_cs = red + 32;                                                     // [D]
  uint64_t* full = reinterpret_cast<uint64_t*>(rope_cs + 256);                  // [kSlots]
  uint64_t* empty = full + kSlots;                                               // [kSlots]
  const int warp = threadIdx.x >> 5;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    produce(p, D, ring, full, empty);
    return;
  }

  // cos / sin of this step's position, for every layer's q and k (as qkv_prologue computes them).
  for (int j = threadIdx.x; j < D / 2; j += kConsumers) {
    float sn, cn;
    sincosf(static_cast<float>(p.positions[0]) * p.inv_freq[j], &sn, &cn);
    rope_cs[j] = cn * p.rope_scaling;
    rope_cs[D / 2 + j] = sn * p.rope_scaling;
  }
  // The CTA's rows of the residual stream (o and down share the H-row partition, so the CTA is the only
  // writer of these rows): kept in shared memory, starting from the embedding.
  const Slice own = layer_slice(p, p.layers[0], 1, D);
  for (int i = threadIdx.x; i < own.r1 - own.r0; i += kConsumers) res_s[i] = __bfloat162float(p.hidden[own.r0 + i]);
  consumer_sync();
  const int ctx = p.context_lens[0];
  const Unit un = my_unit(p, ctx);
  uint32_t piece = 0;
  unsigned barrier = 0;
  // Trace (CTA 0, thread 0): the start, then PersistentDecoder::kTraceMarks marks per layer, each the
  // time (globaltimer ns) and the SM cycles spent waiting for weight pieces since the previous mark.
  const bool tracing = p.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0;
  unsigned long long waited = 0;
  unsigned long long* wait_cycles = tracing ? &waited : nullptr;
  int mark_index = 0;
  auto mark = [&] {
    if (tracing) {
      p.trace[1 + 2 * mark_index] = globaltimer();
      p.trace[2 + 2 * mark_index] = waited;
      waited = 0;
    }
    ++mark_index;
  };
  auto barrier_mark = [&](bool sync) {
    if (sync) grid_sync(p.bar, barrier);
    mark();
  };
  if (tracing) p.trace[0] = globaltimer();
  bf16* stage = kv_stage + warp * (kKvStageBytes / 2 / kConsumerWarps);  // this warp's K/V staging
  KeyRows<D> first_rows{};
  if (un.active) first_rows = key_rows<D>(p, un.kb + warp, un.ke);
  for (int l = 0; l < p.num_layers; ++l) {
    const LayerPtrs L = p.layers[l];
    const bool last = l == p.num_layers - 1;

    // A: qkv = rmsnorm(residual) @ Wqkv^T (the slice's rows).
    norm_to_x(p, l == 0, L.in_norm, xs, red);
    mark();
    consume(layer_slice(p, L, 0, D), ring, full, empty, piece, xs, partial, wait_cycles,
            [&](int64_t row, float sum) { p.qkv[row] = __float2bfloat16_rn(sum); });
    mark();
    if (un.active) stage_keys<D>(L, p.Hk, un.h, first_rows, stage);  // old keys: independent of phase A
    mark();
    barrier_mark(true);

    // C: attention partials; the last split of each kv head combines them.
    if (un.active) attention_unit<D, kG>(p, L, un, ctx, stage, rope_cs, reinterpret_cast<float*>(xs));
    mark();
    barrier_mark(true);

    // E: residual += attn @ Wo^T (layer 0: the residual starts as the embedding in `hidden`).
    load_vector(xs, p.attn, p.Hq * D);
    mark();
    consume(layer_slice(p, L, 1, D), ring, full, empty, piece, xs, partial, wait_cycles, [&](int64_t j, float sum) {
      const float r = bf(res_s[j - own.r0] + bf(sum));
      res_s[j - own.r0] = r;
      p.residual[j] = __float2bfloat16_rn(r);
    });
    mark();
    barrier_mark(true);

    // F: act = silu(gate) * up, gate and up from rmsnorm(residual).
    norm_to_x(p, false, L.post_norm, xs, red);
    mark();
    const Slice gate = layer_slice(p, L, 2, D);
    consume(gate, ring, full, empty, piece, xs, partial, wait_cycles, [&](int64_t row, float sum) { gate_s[row - gate.r0] = bf(sum); });
    consume(layer_slice(p, L, 3, D), ring, full, empty, piece, xs, partial, wait_cycles, [&](int64_t row, float sum) {
      const int64_t j = row - p.I;
      p.act[j] = __float2bfloat16_rn(silu(gate_s[j - gate.r0]) * bf(sum));
    });
    mark();
    barrier_mark(true);

    // G: residual += act @ Wdown^T; the last layer hands (hidden, residual) over as the layer loop does.
    load_vector(xs, p.act, p.I);
    mark();
    consume(layer_slice(p, L, 4, D), ring, full, empty, piece, xs, partial, wait_cycles, [&](int64_t j, float sum) {
      if (last) {
        p.hidden[j] = __float2bfloat16_rn(sum);
      } else {
        const float r = bf(res_s[j - own.r0] + bf(sum));
        res_s[j - own.r0] = r;
        p.residual[j] = __float2bfloat16_rn(r);
      }
    });
    mark();
    barrier_mark(!last);
  }
  // Every CTA has passed every barrier once all have counted their exit: the last one resets the
  // counters for the next launch (stream order makes the reset visible to it).
  if (threadIdx.x == 0 && atomicAdd(p.bar + 1, 1u) == gridDim.x - 1) {
    p.bar[0] = 0;
    p.bar[1] = 0;
  }
#endif
}

int sm_count(int device) {
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

int group_bucket(int64_t g) { return g <= 2 ? 2 : g <= 4 ? 4 : 8; }

// The instantiation for (head_dim, GQA group); persistent_decode_unsupported() keeps the group within
// what the attention scratch holds (D 64: <= 8, D 128: <= 4, D 256: <= 2).
void* kernel_for(int64_t d, int64_t g) {
  const int kg = group_bucket(g);
  if (d == 64) return kg == 2 ? reinterpret_cast<void*>(persistent_decode_kernel<64, 2>)
                    : kg == 4 ? reinterpret_cast<void*>(persistent_decode_kernel<64, 4>)
                              : reinterpret_cast<void*>(persistent_decode_kernel<64, 8>);
  if (d == 128) return kg == 2 ? reinterpret_cast<void*>(persistent_decode_kernel<128, 2>)
                               : reinterpret_cast<void*>(persistent_decode_kernel<128, 4>);
  return reinterpret_cast<void*>(persistent_decode_kernel<256, 2>);
}

bool is_bf16_matrix(const TensorView& t, int64_t rows, int64_t cols) {
  return t.defined() && t.dtype() == DType::kBF16 && t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols &&
         aligned16(t.data());
}
bool is_bf16_vector(const TensorView& t, int64_t n) {
  return t.defined() && t.dtype() == DType::kBF16 && t.numel() == n && aligned16(t.data());
}

}  // namespace

struct PersistentDecoder::Layout {
  Params params;            // everything but the step's tensors
  void* kernel = nullptr;   // the (head_dim, GQA group) instantiation
};

bool persistent_decode_enabled() {
  const char* e = std::getenv("NANOVLLM_PERSISTENT_DECODE");
  return e != nullptr && std::strcmp(e, "1") == 0;
}

std::string persistent_decode_unsupported(const PersistentDecodeModel& m, int device) {
  int major = 0, coop = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major < 9) return "needs sm_90 (bulk copies)";
  if (!coop) return "the device has no cooperative launch";
  if (static_cast<size_t>(optin) < kSmemBytes) return "not enough shared memory per block";
  const int64_t H = m.hidden, Hq = m.heads, Hk = m.kv_heads, D = m.head_dim, I = m.intermediate;
  if (D != 64 && D != 128 && D != 256) return "head_dim not 64/128/256";
  if (Hk < 1 || Hq % Hk != 0) return "heads not a multiple of kv heads";
  if (Hk > sm_count(device)) return "more kv heads than SMs";
  const int64_t g = Hq / Hk;
  if (g > (D == 256 ? 4 : 8)) return "GQA group too large";
  // Attention scratch (q, new k/v, per-warp states) lives in the phase-input buffer.
  if ((g * D + 2 * D + int64_t{kConsumerWarps} * g * (D + 2)) * 4 > kXBytes) return "attention scratch too large";
  for (const int64_t k : {H, Hq * D, I})
    if (k % 8 != 0 || k > kMaxK || k * 2 > kXBytes) return "a row is longer than 12,288 elements or not a multiple of 8";
  const int G = sm_count(device);
  for (const int64_t n : {(Hq + 2 * Hk) * D, H, I})
    if ((n + G - 1) / G > kMaxCtaRows) return "a CTA's row slice exceeds the per-CTA buffers";
  if (m.layers.empty()) return "no layers";
  if (!m.rope_inv_freq.defined() || m.rope_inv_freq.dtype() != DType::kF32 || m.rope_inv_freq.numel() != D / 2)
    return "rope table missing";
  for (const PersistentDecodeLayer& L : m.layers) {
    if (L.qkv_bias.defined() || L.o_bias.defined()) return "attention biases";
    if (!is_bf16_vector(L.input_layernorm, H) || !is_bf16_vector(L.post_attention_layernorm, H) ||
        !is_bf16_matrix(L.qkv_proj, (Hq + 2 * Hk) * D, H) || !is_bf16_matrix(L.o_proj, H, Hq * D) ||
        !is_bf16_matrix(L.gate_up_proj, 2 * I, H) || !is_bf16_matrix(L.down_proj, H, I))
      return "weights not bf16 of the expected shapes";
    if (L.q_norm.defined() != L.k_norm.defined() || (L.q_norm.defined() && (!is_bf16_vector(L.q_norm, D) || !is_bf16_vector(L.k_norm, D))))
      return "q/k norm weights not bf16 [head_dim]";
    if (!L.k_cache.defined() || L.k_cache.dtype() != DType::kBF16 || L.k_cache.ndim() != 4 || L.k_cache.dim(2) != Hk ||
        L.k_cache.dim(3) != D || !L.v_cache.defined() || L.v_cache.shape() != L.k_cache.shape() ||
        L.v_cache.dtype() != DType::kBF16)
      return "KV cache not bf16 [blocks, block_size, kv_heads, head_dim]";
  }
  return {};
}

PersistentDecoder::PersistentDecoder(const PersistentDecodeModel& m, int device) : model_(m) {
  const std::string why = persistent_decode_unsupported(m, device);
  NANOVLLM_CHECK(why.empty(), "persistent decode: ", why);
  grid_ = sm_count(device);
  void* kernel = kernel_for(m.head_dim, m.heads / m.kv_heads);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmemBytes));
  NANOVLLM_CHECK(per_sm >= 1, "persistent decode: the kernel does not fit on an SM");

  std::vector<LayerPtrs> host;
  for (const PersistentDecodeLayer& L : m.layers) {
    auto c = [](const TensorView& t) { return t.defined() ? static_cast<const bf16*>(t.data()) : nullptr; };
    host.push_back({c(L.input_layernorm), c(L.qkv_proj), c(L.q_norm), c(L.k_norm), c(L.o_proj),
                    c(L.post_attention_layernorm), c(L.gate_up_proj), c(L.down_proj),
                    static_cast<bf16*>(L.k_cache.data()), static_cast<bf16*>(L.v_cache.data())});
  }
  CUDA_CHECK(cudaMalloc(&layers_dev_, host.size() * sizeof(LayerPtrs)));
  CUDA_CHECK(cudaMemcpy(layers_dev_, host.data(), host.size() * sizeof(LayerPtrs), cudaMemcpyHostToDevice));

  // Scratch: qkv [(Hq + 2 Hk) D] bf16, attention output [Hq D] bf16, MLP activation [I] bf16, split
  // partials [Hq, s_max, D] and [Hq, s_max] f32, then the barrier counters (2) and per-kv-head arrival
  // counters, zeroed once: the kernel leaves them zero.
  const int64_t Hq = m.heads, Hk = m.kv_heads, D = m.head_dim, s_max = std::max<int64_t>(1, grid_ / Hk);
  auto align = [](int64_t b) { return static_cast<size_t>((b + 255) / 256 * 256); };
  const size_t qkv_at = 0, attn_at = qkv_at + align((Hq + 2 * Hk) * D * 2), act_at = attn_at + align(Hq * D * 2),
               part_o_at = act_at + align(m.intermediate * 2), lse_at = part_o_at + align(Hq * s_max * D * 4),
               bar_at = lse_at + align(Hq * s_max * 4), bytes = bar_at + 256 + align(Hk * 4);
  CUDA_CHECK(cudaMalloc(&scratch_, bytes));
  CUDA_CHECK(cudaMemset(scratch_, 0, bytes));
  char* base = static_cast<char*>(scratch_);

  fixed_ = std::make_unique<Layout>();
  Params& p = fixed_->params;
  p.layers = static_cast<const LayerPtrs*>(layers_dev_);
  p.num_layers = static_cast<int>(m.layers.size());
  p.qkv = reinterpret_cast<bf16*>(base + qkv_at);
  p.attn = reinterpret_cast<bf16*>(base + attn_at);
  p.act = reinterpret_cast<bf16*>(base + act_at);
  p.part_o = reinterpret_cast<float*>(base + part_o_at);
  p.part_lse = reinterpret_cast<float*>(base + lse_at);
  p.bar = reinterpret_cast<unsigned*>(base + bar_at);
  p.head_count = p.bar + 64;  // after the two barrier counters, in the zeroed tail
  p.inv_freq = m.rope_inv_freq.data_as<const float>();
  p.rope_scaling = m.rope_attention_scaling;
  p.H = static_cast<int>(m.hidden);
  p.Hq = static_cast<int>(Hq);
  p.Hk = static_cast<int>(Hk);
  p.I = static_cast<int>(m.intermediate);
  p.s_max = static_cast<int>(s_max);
  p.eps = m.rms_norm_eps;
  p.scale_log2 = m.attn_scale * 1.4426950408889634f;
  fixed_->kernel = kernel;
}

PersistentDecoder::~PersistentDecoder() {
  cudaFree(layers_dev_);
  cudaFree(scratch_);
}

void PersistentDecoder::run(TensorView hidden, TensorView residual, TensorView positions, const AttentionMetadata& meta,
                            cudaStream_t st) {
  const int64_t H = model_.hidden;
  NANOVLLM_CHECK(is_bf16_vector(hidden, H) && is_bf16_vector(residual, H),
                 "persistent decode: hidden and residual must be bf16 [1, ", H, "]");
  NANOVLLM_CHECK(meta.num_seqs == 1 && meta.num_tokens == 1, "persistent decode: one sequence with one token, got ",
                 meta.num_seqs, " sequences, ", meta.num_tokens, " tokens");
  NANOVLLM_CHECK(positions.dtype() == DType::kI32 && positions.numel() >= 1, "persistent decode: positions i32 [1]");
  NANOVLLM_CHECK(meta.block_size >= 1 && meta.block_size == model_.layers[0].k_cache.dim(1),
                 "persistent decode: block size ", meta.block_size, " does not match the cache");

  Params p = fixed_->params;  // + this step's tensors
  p.hidden = static_cast<bf16*>(hidden.data());
  p.residual = static_cast<bf16*>(residual.data());
  p.trace = static_cast<unsigned long long*>(trace_);
  p.positions = positions.data_as<const int32_t>();
  p.context_lens = meta.context_lens.data_as<const int32_t>();
  p.block_table = meta.block_tables.data_as<const int32_t>();
  p.slot_mapping = meta.slot_mapping.data_as<const int32_t>();
  p.block_size = static_cast<int>(meta.block_size);

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid_));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // all CTAs co-resident: the grid barriers rely on it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  void* args[] = {&p};
  CUDA_CHECK(cudaLaunchKernelExC(&cfg, fixed_->kernel, args));
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
