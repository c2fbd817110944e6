// The weight loader's fp8 switches for the engine's `quantization` option (docs/fp8.md): "fp8" quantizes a
// dense checkpoint's projections at load; a backend with fp8 kernels (CUDA) keeps fp8 projections in e4m3 unless
// the option is "none", the CPU backend dequantizes them to f32 (its reference).
#pragma once

#include "nanovllm/engine/config.h"
#include "nanovllm/model/weights.h"

namespace nanovllm {

inline void set_weight_quantization(WeightLoadOptions& opt, const ModelOptions& model, bool fp8_kernels) {
  opt.quantize_fp8 = model.quantization == "fp8";
  opt.keep_fp8 = fp8_kernels && model.quantization != "none";
}

}  // namespace nanovllm
