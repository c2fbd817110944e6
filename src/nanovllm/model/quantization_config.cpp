#include "nanovllm/model/quantization_config.h"

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm {
namespace {

using nlohmann::json;

std::string string_field(const json& q, const char* key, const std::string& fallback, const std::string& where) {
  if (!q.contains(key) || q.at(key).is_null()) return fallback;
  NANOVLLM_CHECK(q.at(key).is_string(), where, ": field '", key, "' must be a string (got ", q.at(key).dump(), ")");
  return q.at(key).get<std::string>();
}

}  // namespace

bool QuantizationConfig::keeps_unquantized(const std::string& weight_name) const {
  const std::string suffix = ".weight";
  std::string module = weight_name;
  if (module.size() > suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0)
    module.resize(module.size() - suffix.size());
  for (const std::string& m : modules_to_not_convert)
    if (module.find(m) != std::string::npos) return true;
  return false;
}

QuantizationConfig parse_quantization_config(const json& q, const std::string& file) {
  const std::string where = file + ": quantization_config";
  NANOVLLM_CHECK(q.is_object(), where, " must be an object (got ", q.dump(), ")");
  QuantizationConfig c;
  NANOVLLM_CHECK(q.contains("quant_method"), where, ": required field 'quant_method' is missing");
  const std::string method = string_field(q, "quant_method", "", where);
  NANOVLLM_CHECK(method == "fp8", where, ": field 'quant_method' is '", method,
                 "'; only 'fp8' (block-scaled e4m3, as Qwen3-*-FP8) is supported");
  const std::string fmt = string_field(q, "fmt", "e4m3", where);
  NANOVLLM_CHECK(fmt == "e4m3", where, ": field 'fmt' is '", fmt, "'; only 'e4m3' is supported");
  const std::string scheme = string_field(q, "activation_scheme", "dynamic", where);
  NANOVLLM_CHECK(scheme == "dynamic", where, ": field 'activation_scheme' is '", scheme,
                 "'; only 'dynamic' is supported (activations are quantized per token and 128 columns at run time)");
  NANOVLLM_CHECK(q.contains("weight_block_size") && !q.at("weight_block_size").is_null(), where,
                 ": field 'weight_block_size' is missing: per-tensor FP8 is not supported, only 128 x 128 blocks");
  const json& b = q.at("weight_block_size");
  const bool is_128 = b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() &&
                      b[0].get<int64_t>() == kFp8BlockSize && b[1].get<int64_t>() == kFp8BlockSize;
  NANOVLLM_CHECK(is_128, where, ": field 'weight_block_size' is ", b.dump(), "; only [128, 128] is supported");
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    if (!q.contains(key) || q.at(key).is_null()) continue;
    const json& v = q.at(key);
    NANOVLLM_CHECK(v.is_array(), where, ": field '", key, "' must be a list of module names (got ", v.dump(), ")");
    for (const json& m : v) {
      NANOVLLM_CHECK(m.is_string() && !m.get<std::string>().empty(), where, ": field '", key,
                     "' must hold non-empty module names (got ", m.dump(), ")");
      c.modules_to_not_convert.push_back(m.get<std::string>());
    }
  }
  for (const auto& [key, value] : q.items()) {
    if (key == "quant_method" || key == "fmt" || key == "activation_scheme" || key == "weight_block_size" ||
        key == "modules_to_not_convert" || key == "ignored_layers")
      continue;
    NANOVLLM_WARN(where, ": ignoring field '", key, "' = ", value.dump(), " (not used by block-scaled fp8)");
  }
  c.method = QuantizationConfig::Method::kFp8Block;
  return c;
}

}  // namespace nanovllm
