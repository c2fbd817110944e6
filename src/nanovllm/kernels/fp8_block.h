// Block-scaled FP8 (docs/fp8.md): a weight [R, C] stored as e4m3 codes q [R, C] and one f32 scale per 128 x 128
// block, scale [ceil(R / 128), ceil(C / 128)]; its value is w[r, c] = e4m3(q[r, c]) * scale[r / 128, c / 128]
// (checkpoints call the scale `weight_scale_inv`: it is multiplied in). Edge blocks may be partial. Host code,
// shared by the loader (dequantize, quantize at load) and the CPU reference kernels.
#pragma once

#include <cstdint>
#include <string>

#include "nanovllm/core/tensor.h"

namespace nanovllm {

inline constexpr int64_t kFp8BlockSize = 128;  // rows and columns of one scale block
// ops::linear_fp8 on CUDA streams the weights against bf16 activations up to this many rows (f32 FMAs per token),
// and up to kFp8MmaGemvMaxTokens on the bf16 tensor cores (the codes made bf16 in registers); more rows quantize
// the activations and run on fp8 tensor cores (kernels/cuda/fp8_linear.cu).
inline constexpr int64_t kFp8GemvMaxTokens = 1;
inline constexpr int64_t kFp8MmaGemvMaxTokens = 16;

inline int64_t fp8_blocks(int64_t n) { return (n + kFp8BlockSize - 1) / kFp8BlockSize; }
// [ceil(R / 128), ceil(C / 128)] for a 2-D weight shape.
Shape fp8_scale_shape(const Shape& weight);
// The checkpoint name of a weight's block scales: "x.weight" -> "x.weight_scale_inv".
std::string fp8_scale_name(const std::string& weight_name);

// Quantizes w [rows, cols] (row-major f32) per block: scale = max |w| over the block / 448 (1 for an all-zero
// block), q = e4m3(w / scale), round to nearest even. q [rows, cols]; scale [ceil(rows/128), ceil(cols/128)].
// A band of rows starting on a multiple of 128 can be quantized on its own (its scales are one row of blocks).
void quantize_fp8_blocks(const float* w, int64_t rows, int64_t cols, uint8_t* q, float* scale);

// Dequantizes elements [first, first + count) of the row-major q [rows, cols] (any rows) with its scale
// [ceil(rows / 128), ceil(cols / 128)] into out[0, count): one f32 product each.
void dequantize_fp8_run(const uint8_t* q, const float* scale, int64_t cols, int64_t first, int64_t count, float* out);

}  // namespace nanovllm
