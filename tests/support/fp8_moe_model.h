// The attention and dense shape of the tests' FP8 Qwen3-MoE models: every projection in whole 128 x 128 blocks
// (hidden 256, 2 q heads and 1 KV head of 128, dense intermediate 256, 4 layers), which the kept-fp8 loader and the
// CUDA fp8 kernels need. Each test sets its own experts (count, top-k, intermediate size, which layers are sparse).
#pragma once

#include <nlohmann/json.hpp>

#include "nanovllm/model/test_model.h"

namespace nanovllm::testing {

inline nlohmann::json moe_in_whole_fp8_blocks() {
  nlohmann::json j = test_model_config("qwen3-moe-tiny");
  j["hidden_size"] = 256;
  j["intermediate_size"] = 256;
  j["num_attention_heads"] = 2;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 128;
  j["num_hidden_layers"] = 4;
  return j;
}

}  // namespace nanovllm::testing
