// out[t, :] = table[ids[t], :]. One block per token row; bf16 -> bf16 rows move as 16-byte vectors.
// Ids were range-checked on the host side contract (ops.cpp); an id outside [0, V) is clamped to a
// zero row here rather than read out of bounds.
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

__global__ void embedding_vec_kernel(uint4* __restrict__ out, const int32_t* __restrict__ ids,
                                     const uint4* __restrict__ table, int64_t vocab, int64_t chunks) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];  // step metadata (host upload): readable before the PDL wait
  uint4* dst = out + t * chunks;                  // [H/8]
  pdl_wait();  // `out` may still be read by the predecessor
  pdl_trigger();
  if (id < 0 || id >= vocab) {
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) dst[c] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = table + id * chunks;         // [H/8]
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) dst[c] = __ldg(src + c);
}

__global__ void embedding_generic_kernel(void* out, int out_dt, const int32_t* __restrict__ ids,
                                         const void* table, int table_dt, int64_t vocab, int64_t H) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  pdl_wait();
  pdl_trigger();
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    store_f32(out, out_dt, t * H + i, ok ? load_f32(table, table_dt, id * H + i) : 0.0f);
}

}  // namespace

void embedding(TensorView out, TensorView ids, TensorView table, ops::Stream s) {
  const int64_t T = out.dim(0), H = out.dim(1), V = table.dim(0);
  if (T == 0 || H == 0) return;
  const ops::Stream st = s;
  const bool vec = out.dtype() == DType::kBF16 && table.dtype() == DType::kBF16 && H % 8 == 0 &&
                   aligned16(out.data()) && aligned16(table.data());
  if (vec) {
    const int64_t chunks = H / 8;
    const int threads = chunks >= 256 ? 256 : static_cast<int>((chunks + 31) / 32 * 32);
    launch_pdl(embedding_vec_kernel, dim3(static_cast<unsigned>(T)), dim3(threads), 0, st, out.data_as<uint4>(),
               ids.data_as<const int32_t>(), table.data_as<const uint4>(), V, chunks);
  } else {
    launch_pdl(embedding_generic_kernel, dim3(static_cast<unsigned>(T)), dim3(256), 0, st, out.data(), dt(out),
               ids.data_as<const int32_t>(), table.data(), dt(table), V, H);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
