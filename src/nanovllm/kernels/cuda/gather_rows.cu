// out[i, :] = in[rows[i], :] (same dtype): a row copy, 16 bytes at a time when rows allow it.
#include "nanovllm/kernels/cuda/common.cuh"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/pdl.cuh"

namespace nanovllm::cuda_ops {
namespace {

template <typename V>
__global__ void gather_rows_kernel(V* __restrict__ out, const V* __restrict__ in,
                                   const int32_t* __restrict__ rows, int64_t n_in, int64_t row_elems) {
  const int64_t i = blockIdx.x;
  const int64_t r = rows[i];  // step metadata: readable before the PDL wait
  pdl_wait();
  pdl_trigger();
  if (r < 0 || r >= n_in) return;  // contract: validated by ops.cpp; never read out of bounds
  const V* src = in + r * row_elems;
  V* dst = out + i * row_elems;
  for (int64_t c = threadIdx.x; c < row_elems; c += blockDim.x) dst[c] = src[c];
}

}  // namespace

void gather_rows(TensorView out, TensorView in, TensorView rows, ops::Stream s) {
  const int64_t S = out.dim(0);
  if (S == 0 || out.numel() == 0) return;
  const size_t row_bytes = out.nbytes() / static_cast<size_t>(S);
  const int64_t n_in = in.dim(0);
  const ops::Stream st = s;
  const unsigned grid = static_cast<unsigned>(S);
  const int32_t* r = rows.data_as<const int32_t>();
  if (row_bytes % 16 == 0 && aligned16(out.data()) && aligned16(in.data())) {
    launch_pdl(gather_rows_kernel<uint4>, dim3(grid), dim3(256), 0, st, out.data_as<uint4>(), in.data_as<const uint4>(),
               r, n_in, static_cast<int64_t>(row_bytes / 16));
  } else if (row_bytes % 4 == 0) {
    launch_pdl(gather_rows_kernel<uint32_t>, dim3(grid), dim3(256), 0, st, out.data_as<uint32_t>(),
               in.data_as<const uint32_t>(), r, n_in, static_cast<int64_t>(row_bytes / 4));
  } else {
    launch_pdl(gather_rows_kernel<uint8_t>, dim3(grid), dim3(256), 0, st, out.data_as<uint8_t>(),
               in.data_as<const uint8_t>(), r, n_in, static_cast<int64_t>(row_bytes));
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace nanovllm::cuda_ops
