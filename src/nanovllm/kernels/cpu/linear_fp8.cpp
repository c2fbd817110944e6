// The references of ops::linear_fp8 (block-scaled fp8 weights, kernels/fp8_block.h): exact f64 sums over the
// dequantized weights (the op on the CPU backend, and the oracle of the CUDA weight-streaming path), and the
// same product with the activations quantized per row and 128 columns the way the CUDA fp8 GEMM does it (its
// oracle). Threads split the output rows.
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm::cpu {
namespace {

// out[t, n] = sum over 128-column blocks b of block_dot(t, n, b) (+ bias[n]), in f64. Per output row n of the
// weight: its codes and its block scales.
template <class BlockDot>
void blocked_linear(TensorView out, TensorView weight, TensorView weight_scale, TensorView bias, BlockDot block_dot) {
  const int64_t T = out.dim(0), N = out.dim(1), K = weight.dim(1), blocks = K / kFp8BlockSize;
  const auto* codes = weight.data_as<const uint8_t>();
  const auto* scales = weight_scale.data_as<const float>();
  std::vector<float> bias_f32(static_cast<size_t>(N), 0.0f);
  if (bias.defined()) load_row_f32(bias.data(), bias.dtype(), 0, N, bias_f32.data());
  parallel_for(N, [&](int64_t n0, int64_t n1) {
    std::vector<float> column(static_cast<size_t>(T));
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* row = codes + n * K;
      const float* row_scales = scales + (n / kFp8BlockSize) * blocks;
      for (int64_t t = 0; t < T; ++t) {
        double sum = 0;
        for (int64_t b = 0; b < blocks; ++b) sum += block_dot(t, row, row_scales[b], b);
        column[static_cast<size_t>(t)] = static_cast<float>(sum + bias_f32[static_cast<size_t>(n)]);
      }
      for (int64_t t = 0; t < T; ++t) store_row_f32(&column[static_cast<size_t>(t)], 1, out.data(), out.dtype(), t * N + n);
    }
  }, 4);
}

}  // namespace

void linear_fp8(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias) {
  const int64_t T = in.dim(0), K = in.dim(1);
  std::vector<float> x(static_cast<size_t>(T * K));
  load_row_f32(in.data(), in.dtype(), 0, T * K, x.data());
  blocked_linear(out, weight, weight_scale, bias, [&](int64_t t, const uint8_t* row, float scale, int64_t b) {
    double sum = 0;
    for (int64_t k = b * kFp8BlockSize; k < (b + 1) * kFp8BlockSize; ++k) {
      const float w = fp8_e4m3_to_f32(row[k]) * scale;  // the loader's dequantized value (one f32 product)
      sum += static_cast<double>(w) * x[static_cast<size_t>(t * K + k)];
    }
    return sum;
  });
}

void linear_fp8_quantized(TensorView out, TensorView in, TensorView weight, TensorView weight_scale, TensorView bias) {
  const int64_t T = in.dim(0), K = in.dim(1), blocks = K / kFp8BlockSize;
  std::vector<float> x(static_cast<size_t>(K));
  std::vector<uint8_t> x_codes(static_cast<size_t>(T * K));
  std::vector<float> x_scales(static_cast<size_t>(T * blocks));
  for (int64_t t = 0; t < T; ++t) {  // one row at a time: 1 x 128 blocks
    load_row_f32(in.data(), in.dtype(), t * K, K, x.data());
    quantize_fp8_blocks(x.data(), 1, K, x_codes.data() + t * K, x_scales.data() + t * blocks);
  }
  blocked_linear(out, weight, weight_scale, bias, [&](int64_t t, const uint8_t* row, float scale, int64_t b) {
    double dot = 0;  // products of two e4m3 values are exact, and so is their sum in f64
    for (int64_t k = b * kFp8BlockSize; k < (b + 1) * kFp8BlockSize; ++k)
      dot += static_cast<double>(fp8_e4m3_to_f32(row[k])) * fp8_e4m3_to_f32(x_codes[static_cast<size_t>(t * K + k)]);
    return dot * scale * x_scales[static_cast<size_t>(t * blocks + b)];
  });
}

}  // namespace nanovllm::cpu
