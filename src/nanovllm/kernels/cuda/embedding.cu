// out[t, :] = table[ids[t] - id_offset, :]. One block per token row; bf16 -> bf16 rows move as 16-byte
// vectors. An id with no row in the table gives a zero row: another rank's id for the vocab-parallel
// embedding (id_offset = the rank's first id); for the plain embedding (offset 0) ids were range-checked
// on the host side contract (ops.cpp), and a bad one is clamped to zeros rather than read out of bounds.
// gather_vocab_shards: the all-gathered [N, S, Vr] logits to [S, V], one thread per output element.
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

__global__ void embedding_vec_kernel(uint4* __restrict__ out, const int32_t* __restrict__ ids,
                                     const uint4* __restrict__ table, int64_t rows, int64_t id_offset,
                                     int64_t chunks) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t] - id_offset;  // step metadata (host upload): readable before the PDL wait
  uint4* dst = out + t * chunks;                  // [H/8]
  pdl_wait();  // `out` may still be read by the predecessor
  pdl_trigger();
  if (id < 0 || id >= rows) {
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) dst[c] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = table + id * chunks;         // [H/8]
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) dst[c] = __ldg(src + c);
}

__global__ void embedding_generic_kernel(void* out, int out_dt, const int32_t* __restrict__ ids,
                                         const void* table, int table_dt, int64_t rows, int64_t id_offset,
                                         int64_t H) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t] - id_offset;
  const bool ok = id >= 0 && id < rows;
  pdl_wait();
  pdl_trigger();
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    store_f32(out, out_dt, t * H + i, ok ? load_f32(table, table_dt, id * H + i) : 0.0f);
}

// out [S, V] <- shards [N, S, Vr]: element (s, c) comes from rank c / Vr, row s, column c % Vr.
__global__ void gather_vocab_shards_kernel(float* __restrict__ out, const float* __restrict__ shards, int64_t rows,
                                           int64_t per_rank, int64_t vocab) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * vocab) return;
  const int64_t s = i / vocab, c = i % vocab, r = c / per_rank;
  out[i] = shards[(r * rows + s) * per_rank + c % per_rank];
}

void launch_embedding(TensorView out, TensorView ids, TensorView table, int64_t id_offset, ops::Stream s) {
  const int64_t T = out.dim(0), H = out.dim(1), rows = table.dim(0);
  if (T == 0 || H == 0) return;
  const bool vec = out.dtype() == DType::kBF16 && table.dtype() == DType::kBF16 && H % 8 == 0 &&
                   aligned16(out.data()) && aligned16(table.data());
  if (vec) {
    const int64_t chunks = H / 8;
    const int threads = chunks >= 256 ? 256 : static_cast<int>((chunks + 31) / 32 * 32);
    launch_pdl(embedding_vec_kernel, dim3(static_cast<unsigned>(T)), dim3(threads), 0, s, out.data_as<uint4>(),
               ids.data_as<const int32_t>(), table.data_as<const uint4>(), rows, id_offset, chunks);
  } else {
    launch_pdl(embedding_generic_kernel, dim3(static_cast<unsigned>(T)), dim3(256), 0, s, out.data(), dt(out),
               ids.data_as<const int32_t>(), table.data(), dt(table), rows, id_offset, H);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding(TensorView out, TensorView ids, TensorView table, ops::Stream s) {
  launch_embedding(out, ids, table, 0, s);
}

void embedding_vocab_shard(TensorView out, TensorView ids, TensorView table, int64_t vocab_begin, ops::Stream s) {
  launch_embedding(out, ids, table, vocab_begin, s);
}

void gather_vocab_shards(TensorView out, TensorView shards, ops::Stream s) {
  const int64_t rows = out.dim(0), vocab = out.dim(1), n = rows * vocab;
  if (n == 0) return;
  constexpr int kThreads = 256;
  gather_vocab_shards_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream_of(s)>>>(
      out.data_as<float>(), shards.data_as<const float>(), rows, shards.dim(2), vocab);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
