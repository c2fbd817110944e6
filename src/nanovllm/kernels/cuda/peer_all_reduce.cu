// The one-shot peer-memory all-reduce (peer_all_reduce.h has the protocol).
#include "nanovllm/kernels/cuda/peer_all_reduce.h"

#include <algorithm>

#include <cuda_bf16.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm::cuda_ops {

struct PeerAllReduce::KernelParams {
  const uint4* staging[kMaxRanks];  // every rank's staging area [2][cap_vec]
  uint32_t* flags[kMaxRanks];       // every rank's flags [kMaxBlocks][kMaxRanks]
  uint32_t* state;                  // this rank's {generation, CTAs finished}
  const volatile int* abort;
  int rank, size;
  int64_t cap_vec;  // 16-byte vectors per generation's staging area
};

namespace {

constexpr int kThreads = 512;
constexpr int kMaxRanks = PeerAllReduce::kMaxRanks;
constexpr int kSpinsPerAbortCheck = 1024;  // the abort flag is host memory: a PCIe read
constexpr int kChunksPerThread = PeerAllReduce::kMaxHidden / 8 / kThreads;  // fused kernel: a row in registers

using Params = PeerAllReduce::KernelParams;

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_bf16x8(float (&acc)[8], const uint4& v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += f.x;
    acc[2 * i + 1] += f.y;
  }
}

// Steps 1-2 of the protocol for this CTA's vectors [begin, end) of `data`: reads the generation, stages the
// slice, announces it to every peer and waits for theirs. Returns the generation.
__device__ uint32_t stage_and_exchange(const Params& p, const uint4* data, int64_t begin, int64_t end) {
  __shared__ uint32_t gen_s;
  if (threadIdx.x == 0) gen_s = p.state[0];
  __syncthreads();
  const uint32_t gen = gen_s, target = gen + 1;
  uint4* mine = const_cast<uint4*>(p.staging[p.rank]) + static_cast<int64_t>(gen & 1u) * p.cap_vec;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i] = data[i];
  __syncthreads();
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < p.size && peer != p.rank) {
    __threadfence_system();  // this CTA's staged slice is visible before the flag that announces it
    store_release_sys(p.flags[peer] + blockIdx.x * kMaxRanks + p.rank, target);
    const uint32_t* flag = p.flags[p.rank] + blockIdx.x * kMaxRanks + peer;
    // Wrap-safe "flag >= target": peers may already be one generation ahead (their flag says g + 2).
    for (int spins = 1; static_cast<int32_t>(load_acquire_sys(flag) - target) < 0; ++spins) {
      if (spins % kSpinsPerAbortCheck == 0 && *p.abort != 0) break;
    }
  }
  __syncthreads();
  return gen;
}

// Step 3's sum for vector i: the ranks' staged vectors of generation `gen`, in rank order, in fp32 (every
// load issued before the adds, so the N round trips overlap).
__device__ __forceinline__ void rank_order_sum(const Params& p, uint32_t gen, int64_t i, float (&acc)[8]) {
  const int64_t offset = static_cast<int64_t>(gen & 1u) * p.cap_vec + i;
  uint4 v[kMaxRanks];
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r)
    if (r < p.size) v[r] = r == p.rank ? p.staging[r][offset] : __ldcg(p.staging[r] + offset);
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
#pragma unroll
  for (int r = 0; r < kMaxRanks; ++r)
    if (r < p.size) add_bf16x8(acc, v[r]);
}

// The last CTA to finish advances the generation (every CTA read it before counting itself here).
__device__ __forceinline__ void finish(const Params& p, uint32_t gen) {
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(p.state + 1, 1u) == gridDim.x - 1) {
    p.state[1] = 0;
    p.state[0] = gen + 1;
  }
}

// data [nvec] <- the sum; CTA b takes the b-th of gridDim.x even slices.
__global__ void __launch_bounds__(kThreads) all_reduce_kernel(Params p, uint4* data, int64_t nvec) {
  const int64_t per_block = (nvec + gridDim.x - 1) / gridDim.x;
  const int64_t begin = blockIdx.x * per_block, end = begin + per_block < nvec ? begin + per_block : nvec;
  const uint32_t gen = stage_and_exchange(p, data, begin, end);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float acc[8];
    rank_order_sum(p, gen, i, acc);
    data[i] = f32_to_bf16x8(acc);
  }
  finish(p, gen);
}

// x [rows, chunks * 8] <- rms_norm(residual + sum) * weight, residual <- residual + sum, with the numerics
// of all_reduce_kernel followed by rms_norm.cu's add_rms_norm (the sum rounded to bf16, the fp32 add
// rounded to bf16 and normalised): the same residual bits, x within a bf16 ulp (the sum of squares may add
// in another order). CTA b takes a contiguous run of whole rows; a thread keeps its <= kChunksPerThread
// chunks of the row in registers.
__global__ void __launch_bounds__(kThreads) all_reduce_add_rms_norm_kernel(Params p, uint4* x, uint4* residual,
                                                                          const uint4* weight, int64_t rows,
                                                                          int64_t chunks, float eps) {
  __shared__ float red[32];
  uint4 w[kChunksPerThread];  // loaded first: their latency overlaps the exchange's
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t{k} * kThreads;
    if (c < chunks) w[k] = weight[c];
  }
  const int64_t per_block = (rows + gridDim.x - 1) / gridDim.x;
  const int64_t row0 = blockIdx.x * per_block, row1 = row0 + per_block < rows ? row0 + per_block : rows;
  const uint32_t gen = stage_and_exchange(p, x, row0 * chunks, row1 * chunks);
  for (int64_t row = row0; row < row1; ++row) {
    float v[kChunksPerThread][8];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kChunksPerThread; ++k) {
      const int64_t c = threadIdx.x + int64_t{k} * kThreads;
      if (c < chunks) {
        float sum[8], r[8];
        rank_order_sum(p, gen, row * chunks + c, sum);
        bf16x8_to_f32(f32_to_bf16x8(sum), sum);  // the all-reduce's bf16 result
        bf16x8_to_f32(residual[row * chunks + c], r);
#pragma unroll
        for (int i = 0; i < 8; ++i) r[i] += sum[i];
        const uint4 packed = f32_to_bf16x8(r);
        residual[row * chunks + c] = packed;
        bf16x8_to_f32(packed, v[k]);  // normalise what was stored
#pragma unroll
        for (int i = 0; i < 8; ++i) ss += v[k][i] * v[k][i];
      }
    }
    ss = block_sum(ss, red);
    const float rs = rsqrtf(ss / static_cast<float>(chunks * 8) + eps);
#pragma unroll
    for (int k = 0; k < kChunksPerThread; ++k) {
      const int64_t c = threadIdx.x + int64_t{k} * kThreads;
      if (c < chunks) {
        float wf[8], o[8];
        bf16x8_to_f32(w[k], wf);
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = wf[i] * (v[k][i] * rs);
        x[row * chunks + c] = f32_to_bf16x8(o);
      }
    }
  }
  finish(p, gen);
}

}  // namespace

bool PeerAllReduce::supported(int size) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (size < 2 || size > devices || size > kMaxRanks) return false;
  for (int a = 0; a < size; ++a) {
    for (int b = 0; b < size; ++b) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || ok == 0)) return false;
    }
  }
  return true;
}

PeerAllReduce::PeerAllReduce(int size, size_t max_bytes) : max_bytes_(max_bytes / 16 * 16) {
  NANOVLLM_CHECK(supported(size), "peer all-reduce: devices 0..", size - 1,
                 " cannot all access each other's memory (or more than ", kMaxRanks, " ranks)");
  int saved = 0;
  CUDA_CHECK(cudaGetDevice(&saved));
  ranks_.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    for (int p = 0; p < size; ++p) {
      if (p == r) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();  // NCCL may have done it
      else CUDA_CHECK(e);
    }
    Rank& rk = ranks_[static_cast<size_t>(r)];
    CUDA_CHECK(cudaMalloc(&rk.staging, 2 * max_bytes_));
    CUDA_CHECK(cudaMalloc(&rk.flags, sizeof(uint32_t) * kMaxBlocks * kMaxRanks));
    CUDA_CHECK(cudaMalloc(&rk.state, 2 * sizeof(uint32_t)));
    CUDA_CHECK(cudaMemset(rk.flags, 0, sizeof(uint32_t) * kMaxBlocks * kMaxRanks));
    CUDA_CHECK(cudaMemset(rk.state, 0, 2 * sizeof(uint32_t)));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void* flag = nullptr;
  CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  abort_flag_ = static_cast<volatile int*>(flag);
  *abort_flag_ = 0;
  CUDA_CHECK(cudaSetDevice(saved));
}

PeerAllReduce::~PeerAllReduce() {
  int saved = 0;
  if (cudaGetDevice(&saved) != cudaSuccess) saved = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    (void)cudaSetDevice(static_cast<int>(r));
    (void)cudaFree(ranks_[r].staging);
    (void)cudaFree(ranks_[r].flags);
    (void)cudaFree(ranks_[r].state);
  }
  (void)cudaFreeHost(const_cast<int*>(abort_flag_));
  (void)cudaSetDevice(saved);
  (void)cudaGetLastError();
}

bool PeerAllReduce::fits(int64_t numel) const {
  return numel > 0 && numel % 8 == 0 && static_cast<size_t>(numel) * 2 <= max_bytes_;
}

PeerAllReduce::KernelParams PeerAllReduce::params(int rank) const {
  NANOVLLM_CHECK(rank >= 0 && rank < size(), "peer all-reduce: rank ", rank, " of ", size());
  Params p{};
  for (int r = 0; r < size(); ++r) {
    p.staging[r] = static_cast<const uint4*>(ranks_[static_cast<size_t>(r)].staging);
    p.flags[r] = ranks_[static_cast<size_t>(r)].flags;
  }
  p.state = ranks_[static_cast<size_t>(rank)].state;
  p.abort = abort_flag_;
  p.rank = rank;
  p.size = size();
  p.cap_vec = static_cast<int64_t>(max_bytes_ / 16);
  return p;
}

namespace {

void check_aligned(const void* p, const char* what) {
  NANOVLLM_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "peer all-reduce: ", what, " at ", p,
                 " is not 16-byte aligned");
}

}  // namespace

void PeerAllReduce::all_reduce_sum_bf16(int rank, void* data, int64_t numel, cudaStream_t stream) {
  NANOVLLM_CHECK(fits(numel), "peer all-reduce: ", numel, " bf16 elements (needs a multiple of 8, at most ",
                 max_bytes_ / 2, ")");
  check_aligned(data, "data");
  const int64_t nvec = numel / 8;
  // Two vectors per thread before another CTA is worth its flag exchange.
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, (nvec + 2 * kThreads - 1) / (2 * kThreads));
  all_reduce_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(params(rank), static_cast<uint4*>(data),
                                                                            nvec);
  CUDA_CHECK_LAUNCH();
}

bool PeerAllReduce::fits_rows(int64_t rows, int64_t hidden) const {
  return rows > 0 && hidden % 8 == 0 && hidden <= kMaxHidden && fits(rows * hidden);
}

void PeerAllReduce::all_reduce_add_rms_norm_bf16(int rank, void* x, void* residual, const void* weight, int64_t rows,
                                                 int64_t hidden, float eps, cudaStream_t stream) {
  NANOVLLM_CHECK(fits_rows(rows, hidden), "peer all-reduce + RMSNorm: ", rows, " rows of ", hidden,
                 " (needs hidden a multiple of 8 up to ", kMaxHidden, ", at most ", max_bytes_ / 2, " elements)");
  check_aligned(x, "x");
  check_aligned(residual, "residual");
  check_aligned(weight, "weight");
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, rows);
  all_reduce_add_rms_norm_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      params(rank), static_cast<uint4*>(x), static_cast<uint4*>(residual), static_cast<const uint4*>(weight), rows,
      hidden / 8, eps);
  CUDA_CHECK_LAUNCH();
}

void PeerAllReduce::abort() { *abort_flag_ = 1; }

}  // namespace nanovllm::cuda_ops
