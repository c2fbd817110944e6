// The `quantization_config` of a Hugging Face config.json (docs/fp8.md). Supported: block-scaled FP8 as
// Qwen3-*-FP8 and DeepSeek-V3 ship it — projection weights in e4m3 with one scale per 128 x 128 block
// (`<name>.weight_scale_inv`, multiplied in to dequantize) and activations quantized on the fly
// ("activation_scheme": "dynamic"). Anything else is refused naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanovllm {

struct QuantizationConfig {
  enum class Method { kNone, kFp8Block };
  Method method = Method::kNone;
  // Modules the checkpoint keeps unquantized ("modules_to_not_convert", or vLLM's "ignored_layers"): a
  // projection whose module name (its tensor name less ".weight") contains one of them, as transformers
  // matches them.
  std::vector<std::string> modules_to_not_convert;

  bool fp8() const { return method == Method::kFp8Block; }
  bool keeps_unquantized(const std::string& weight_name) const;
};

// Parses config.json's `quantization_config` object; `where` names the file for errors. Refuses (naming the
// field and value) every layout but {"quant_method": "fp8", "fmt": "e4m3" (or absent), "weight_block_size":
// [128, 128], "activation_scheme": "dynamic" (or absent)}; warns about fields it does not know.
QuantizationConfig parse_quantization_config(const nlohmann::json& q, const std::string& where);

}  // namespace nanovllm
