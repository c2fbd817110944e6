// RMSNorm (HF Qwen3RMSNorm math in fp32): out = w * (x * rsqrt(mean(x^2) + eps)), one block per row.
// add_rms_norm: residual += x (fp32 add, stored in the residual's dtype, bf16 like HF), then the stored
// residual is normalised into x. copy_rms_norm (the first layer) and gather_add_rms_norm (the sampled
// rows before the LM head) are the same kernel with the residual copied, or the rows gathered.
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

// The four ops are one kernel in three forms (Form): output row i is normalised from input row
// in_row = rows ? rows[i] : i:
//   kPlain: out[i] = norm(x[in_row]);
//   kAdd:   res_out[i] = res_in[in_row] + x[in_row] (fp32 add, rounded to the residual's dtype), out[i] =
//           norm(res_out[i]): add_rms_norm in place (res_in == res_out, out == x, no rows), and
//           gather_add_rms_norm (the sampled rows of the last layer into their own buffers);
//   kCopy:  res_out[i] = x[i]; out[i] = norm(x[i]): the first layer, which has no residual yet (one
//           launch instead of a copy node and a norm).
enum class Form { kPlain, kAdd, kCopy };

struct NormArgs {
  void* out;
  const void* x;
  const void* res_in;    // kAdd
  void* res_out;         // kAdd, kCopy
  const void* w;
  const int32_t* rows;   // null: row i of the inputs
  int64_t n_in;          // input rows (a gathered row outside [0, n_in) is skipped: ops.cpp validates)
  int out_dt, x_dt, res_dt, w_dt;  // the generic kernel's dtypes
};

__device__ __forceinline__ int64_t input_row(const NormArgs& a) {
  return a.rows != nullptr ? a.rows[blockIdx.x] : int64_t{blockIdx.x};  // step metadata: readable before the wait
}

// kEarly: trigger the dependents before the wait (KernelOptions::pdl_early_norm).
template <Form kForm, bool kEarly>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_vec_kernel(NormArgs a, int64_t chunks, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, in = input_row(a);
  const auto* x = static_cast<const uint4*>(a.x) + in * chunks;
  const auto* w = static_cast<const uint4*>(a.w);
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
  if (in < 0 || in >= a.n_in) return;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t{k} * blockDim.x;
    if (c < chunks) {
      const uint4 xv = x[c];
      bf16x8_to_f32(xv, v[k]);
      if constexpr (kForm == Form::kAdd) {
        float r[8];
        bf16x8_to_f32(static_cast<const uint4*>(a.res_in)[in * chunks + c], r);
#pragma unroll
        for (int i = 0; i < 8; ++i) r[i] += v[k][i];
        const uint4 packed = f32_to_bf16x8(r);
        static_cast<uint4*>(a.res_out)[row * chunks + c] = packed;
        bf16x8_to_f32(packed, v[k]);  // normalise what was stored
      } else if constexpr (kForm == Form::kCopy) {
        static_cast<uint4*>(a.res_out)[row * chunks + c] = xv;
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
      static_cast<uint4*>(a.out)[row * chunks + c] = f32_to_bf16x8(o);
    }
  }
}

template <Form kForm>
__global__ void rms_norm_generic_kernel(NormArgs a, int64_t H, float eps) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, in = input_row(a);
  pdl_wait();
  pdl_trigger();
  if (in < 0 || in >= a.n_in) return;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float v = load_f32(a.x, a.x_dt, in * H + i);
    if constexpr (kForm != Form::kPlain) {
      if constexpr (kForm == Form::kAdd) v += load_f32(a.res_in, a.res_dt, in * H + i);
      store_f32(a.res_out, a.res_dt, row * H + i, v);
      v = load_f32(a.res_out, a.res_dt, row * H + i);  // same thread wrote it: reads back the rounded value
    }
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / static_cast<float>(H) + eps);
  const void* src = kForm == Form::kPlain ? a.x : a.res_out;
  const int src_dt = kForm == Form::kPlain ? a.x_dt : a.res_dt;
  const int64_t src_row = kForm == Form::kPlain ? in : row;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    store_f32(a.out, a.out_dt, row * H + i, load_f32(a.w, a.w_dt, i) * (load_f32(src, src_dt, src_row * H + i) * r));
}

// out [S, H]; x [n_in, H]; residual (kAdd: res_in [n_in, H], res_out [S, H]; kCopy: res_out [S, H]);
// rows [S] or undefined (then S = n_in).
template <Form kForm>
void launch(TensorView out, TensorView x, TensorView res_in, TensorView res_out, TensorView rows, TensorView weight,
            float eps, ops::Stream s) {
  const int64_t S = out.dim(0), H = x.dim(1);
  if (S == 0 || H == 0) return;
  const ops::Stream st = s;
  const int64_t chunks = H / 8;
  const NormArgs a{out.data(), x.data(), res_in.defined() ? res_in.data() : nullptr,
                   res_out.defined() ? res_out.data() : nullptr, weight.data(),
                   rows.defined() ? rows.data_as<const int32_t>() : nullptr, x.dim(0), dt(out), dt(x),
                   res_out.defined() ? dt(res_out) : 0, dt(weight)};
  auto bf16_aligned = [](const TensorView& t) { return t.dtype() == DType::kBF16 && aligned16(t.data()); };
  bool vec = bf16_aligned(out) && bf16_aligned(x) && bf16_aligned(weight) && H % 8 == 0 &&
             chunks <= int64_t{kChunksPerThread} * kMaxThreads;
  if (kForm == Form::kAdd) vec = vec && bf16_aligned(res_in);
  if (kForm != Form::kPlain) vec = vec && bf16_aligned(res_out);
  if (vec) {
    const int64_t per_thread = S <= kWideMaxRows ? 1 : kChunksPerThread;
    int64_t threads = (chunks + per_thread - 1) / per_thread;
    threads = std::min<int64_t>((threads + 31) / 32 * 32, kMaxThreads);  // chunks <= 4 * kMaxThreads: covered
    const auto kernel = context_of(s).options.pdl_early_norm ? rms_norm_vec_kernel<kForm, true> : rms_norm_vec_kernel<kForm, false>;
    launch_pdl(kernel, dim3(static_cast<unsigned>(S)), dim3(static_cast<unsigned>(threads)), 0, st, a, chunks, eps);
  } else {
    launch_pdl(rms_norm_generic_kernel<kForm>, dim3(static_cast<unsigned>(S)), dim3(256), 0, st, a, H, eps);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rms_norm(TensorView out, TensorView x, TensorView weight, float eps, ops::Stream s) {
  launch<Form::kPlain>(out, x, TensorView(), TensorView(), TensorView(), weight, eps, s);
}

void add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, ops::Stream s) {
  launch<Form::kAdd>(x, x, residual, residual, TensorView(), weight, eps, s);
}

void copy_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps, ops::Stream s) {
  launch<Form::kCopy>(x, x, TensorView(), residual, TensorView(), weight, eps, s);
}

void gather_add_rms_norm(TensorView out, TensorView out_residual, TensorView x, TensorView residual, TensorView rows,
                         TensorView weight, float eps, ops::Stream s) {
  launch<Form::kAdd>(out, x, residual, out_residual, rows, weight, eps, s);
}

}  // namespace nanovllm::cuda_ops
