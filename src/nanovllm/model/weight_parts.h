// One checkpoint tensor as the weight loader (weights.cpp) reads it: dense (F32 / BF16 / F16), or block-scaled
// fp8 — e4m3 codes with f32 block scales (kernels/fp8_block.h), from the checkpoint or quantized at load —
// and the block-scale slice that goes with a tensor-parallel slice of an fp8 weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nanovllm/core/dtype.h"
#include "nanovllm/model/safetensors.h"
#include "nanovllm/model/tensor_parallel_plan.h"

namespace nanovllm {

struct PartSource {
  const void* data = nullptr;  // row-major, possibly unaligned (the mapped checkpoint)
  DType dtype = DType::kBF16;  // F32, BF16, F16; or F8E4M3 with `scale`
  Shape shape;                 // [R, C] (fp8) or any (dense)
  std::vector<float> scale;    // fp8: [ceil(R / 128), ceil(C / 128)]
  std::vector<uint8_t> codes;  // fp8 quantized at load: `data` points here
  bool fp8() const { return dtype == DType::kF8E4M3; }
};

// Checkpoint tensor `name` (`t`) as the loader reads it. An F8_E4M3 `t` comes with `scale`, its checkpoint
// block scales (F32, BF16 or F16; converted to f32, each checked finite and >= 0, else an error naming the
// scale tensor and the block). quantize: a dense 2-D `t` quantized per 128 x 128 block (quantize_fp8_blocks)
// on `threads` threads.
PartSource read_part(const std::string& name, const TensorInfo& t, const TensorInfo* scale, bool quantize,
                     int threads);

// Elements [first, first + count) of `p` into `out` as `out_dtype`: F32 / BF16 / F16 (converted, fp8
// dequantized: e4m3 x scale in f32, then rounded to out_dtype), or F8E4M3 (p must be fp8: its codes).
void read_part_elements(const PartSource& p, int64_t first, int64_t count, void* out, DType out_dtype);

// The slice of a weight's block scales that goes with `slice` of the weight: the same ranges in 128-blocks.
// Throws naming `name` unless every range starts and ends on a multiple of 128 (a rank's slice of a
// kept-fp8 weight must own whole blocks; vocabulary padding never applies to projections).
ShardSlice fp8_block_slice(const ShardSlice& slice, const std::string& name);

}  // namespace nanovllm
