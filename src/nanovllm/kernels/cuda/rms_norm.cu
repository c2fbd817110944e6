// RMSNorm (HF Qwen3RMSNorm math in fp32): out = w * (x * rsqrt(mean(x^2) + eps)), one block per row.
// add_rms_norm: residual += x (fp32 add, stored in the residual's dtype, bf16 like HF), then the stored
// residual is normalised into x.
// Fast path (x/out/residual/weight all bf16, H % 8 == 0, H <= 8 * 4 * 1024): each thread keeps its
// <= 4 16-byte chunks of the row in registers, so the row is read once and written once. Small batches
// (T <= kWideMaxRows, decode) use one chunk per thread (up to 1024 threads): a row is one block either
// way, and at T = 1 the latency of a thread's dependent chunk loads is the whole kernel time; larger
// batches keep 4 chunks per thread (fewer, fuller blocks).
// Otherwise a generic path reads the row twice with run-time dtypes.
#include <algorithm>

#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

constexpr int kChunksPerThread = 4;
// Block size cap: the vec kernel keeps kChunksPerThread x 8 floats + weights in registers, so 1024
// threads would exceed the register file (seen on H200: cudaErrorLaunchOutOfResources at H = 12288).
constexpr int kMaxThreads = 512;
constexpr int64_t kWideMaxRows = 256;

// kAdd: residual += x first; `out` is x itself then. kEarly: trigger the dependents before the wait
// (pdl_early_norm()).
template <bool kAdd, bool kEarly>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_vec_kernel(uint4* out, const uint4* x, uint4* residual, const uint4* __restrict__ w,
                                    int64_t chunks, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  float v[kChunksPerThread][8];
  uint4 wv[kChunksPerThread];  // weights loaded up front: their latency overlaps the row's, not the reduction's
  float ss = 0.0f;
  if constexpr (kEarly) pdl_trigger();  // pdl.cuh: only linear projections (weights-only prologues) follow
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {  // PDL prologue: the weights are not the predecessor's output
    const int64_t c = threadIdx.x + int64_t{k} * blockDim.x;
    if (c < chunks) wv[k] = w[c];
  }
  pdl_wait();
  if constexpr (!kEarly) pdl_trigger();
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t{k} * blockDim.x;
    if (c < chunks) {
      bf16x8_to_f32(x[row * chunks + c], v[k]);
      if constexpr (kAdd) {
        float r[8];
        bf16x8_to_f32(residual[row * chunks + c], r);
#pragma unroll
        for (int i = 0; i < 8; ++i) r[i] += v[k][i];
        const uint4 packed = f32_to_bf16x8(r);
        residual[row * chunks + c] = packed;
        bf16x8_to_f32(packed, v[k]);  // normalise what was stored
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += v[k][i] * v[k][i];
    }
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / static_cast<float>(chunks * 8) + eps);
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t{k} * blockDim.x;
    if (c < chunks) {
      float wf[8], o[8];
      bf16x8_to_f32(wv[k], wf);
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = wf[i] * (v[k][i] * r);
      out[row * chunks + c] = f32_to_bf16x8(o);
    }
  }
}

template <bool kAdd>
__global__ void rms_norm_generic_kernel(void* out, int out_dt, const void* x, int x_dt, void* residual,
                                        int res_dt, const void* w, int w_dt, int64_t H, float eps) {
  __shared__ float red[32];
  const int64_t base = int64_t{blockIdx.x} * H;
  pdl_wait();
  pdl_trigger();
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float v = load_f32(x, x_dt, base + i);
    if constexpr (kAdd) {
      store_f32(residual, res_dt, base + i, load_f32(residual, res_dt, base + i) + v);
      v = load_f32(residual, res_dt, base + i);  // same thread wrote it: reads back the rounded value
    }
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / static_cast<float>(H) + eps);
  const void* src = kAdd ? residual : x;
  const int src_dt = kAdd ? res_dt : x_dt;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    store_f32(out, out_dt, base + i, load_f32(w, w_dt, i) * (load_f32(src, src_dt, base + i) * r));
}

template <bool kAdd>
void launch(TensorView out, TensorView x, TensorView residual, TensorView weight, float eps, ops::Stream s) {
  const int64_t T = x.dim(0), H = x.dim(1);
  if (T == 0 || H == 0) return;
  const cudaStream_t st = stream_of(s);
  const int64_t chunks = H / 8;
  bool vec = out.dtype() == DType::kBF16 && x.dtype() == DType::kBF16 && weight.dtype() == DType::kBF16 &&
             H % 8 == 0 && chunks <= int64_t{kChunksPerThread} * kMaxThreads && aligned16(out.data()) &&
             aligned16(x.data()) && aligned16(weight.data());
  if (kAdd) vec = vec && residual.dtype() == DType::kBF16 && aligned16(residual.data());
  if (vec) {
    const int64_t per_thread = T <= kWideMaxRows ? 1 : kChunksPerThread;
    int64_t threads = (chunks + per_thread - 1) / per_thread;
    threads = std::min<int64_t>((threads + 31) / 32 * 32, kMaxThreads);  // chunks <= 4 * kMaxThreads: covered
    const auto kernel = pdl_early_norm() ? rms_norm_vec_kernel<kAdd, true> : rms_norm_vec_kernel<kAdd, false>;
    launch_pdl(kernel, dim3(static_cast<unsigned>(T)), dim3(static_cast<unsigned>(threads)), 0, st, out.data_as<uint4>(), x.data_as<const uint4>(), kAdd ? residual.data_as<uint4>() : nullptr,
               weight.data_as<const uint4>(), chunks, eps);
  } else {
    launch_pdl(rms_norm_generic_kernel<kAdd>, dim3(static_cast<unsigned>(T)), dim3(256), 0, st, out.data(), dt(out),
               x.data(), dt(x), kAdd ? residual.data() : nullptr, kAdd ? dt(residual) : 0, weight.data(),
               dt(weight), H, eps);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(TensorView out, TensorView x, TensorView weight, float eps, ops::Stream s) {
  launch<false>(out, x, TensorView(), weight, eps, s);
}

void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, ops::Stream s) {
  launch<true>(x, x, residual, weight, eps, s);
}

}  // namespace nanovllm::cuda_ops
