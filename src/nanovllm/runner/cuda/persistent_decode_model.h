// The persistent decode kernel's view of a loaded model (kernels/cuda/persistent_decode.h): its weights,
// RoPE table and KV caches, for the runner and the tests that compare the kernel with the layer loop.
#pragma once

#include <vector>

#include "nanovllm/kernels/cuda/persistent_decode.h"
#include "nanovllm/model/qwen3_model.h"

namespace nanovllm {

// kv: one cache per layer of `model`.
cuda_ops::PersistentDecodeModel persistent_decode_model(const Qwen3Model& model, const std::vector<LayerKvCache>& kv);

}  // namespace nanovllm
