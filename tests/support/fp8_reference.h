// An independent reading of block-scaled FP8 checkpoints for tests: e4m3 decoded by its definition, block scales
// read from the raw bytes, and a dequantized F32 copy of a whole checkpoint written with the tests' own
// safetensors writer (model/model_test_util.h) — none of it uses the library's fp8 code.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_test_util.h"

namespace nanovllm::testing {

// e4m3 ("e4m3fn") by its definition: (-1)^s 2^(e - 7) (1 + m / 8); subnormals 2^-6 m / 8; S.1111.111 is NaN.
inline double e4m3_by_definition(uint8_t code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// One element of a raw F32 / BF16 / F16 tensor as a double (F16 normal values only: scales are positive and
// far from the subnormal range).
inline double raw_element(const model_test::RawTensor& t, size_t i) {
  if (t.dtype == "F32") {
    float f;
    std::memcpy(&f, t.bytes.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, t.bytes.data() + 2 * i, 2);
  if (t.dtype == "BF16") {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  EXPECT_EQ(t.dtype, "F16");
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return (h & 0x8000) ? -mag : mag;
}

// The f32 values of an F8_E4M3 weight [R, C] with its block scales [ceil(R / 128), ceil(C / 128)]: each the
// f32 product code x scale (exact in double, then rounded once to f32, as an f32 multiply is).
inline std::vector<float> dequantize_by_definition(const model_test::RawTensor& codes,
                                                   const model_test::RawTensor& scale) {
  EXPECT_EQ(codes.dtype, "F8_E4M3");
  const int64_t rows = codes.shape.at(0), cols = codes.shape.at(1), scale_cols = (cols + 127) / 128;
  EXPECT_EQ(scale.shape, (std::vector<int64_t>{(rows + 127) / 128, scale_cols}));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double s = static_cast<float>(raw_element(scale, static_cast<size_t>((r / 128) * scale_cols + c / 128)));
      const auto code = static_cast<uint8_t>(codes.bytes[static_cast<size_t>(r * cols + c)]);
      out[static_cast<size_t>(r * cols + c)] = static_cast<float>(e4m3_by_definition(code) * s);
    }
  return out;
}

// Copies the fp8 checkpoint in `src` to `dst` dequantized: every F8_E4M3 tensor becomes F32 (its
// `_scale_inv` dropped), the others as they are; config.json loses its quantization_config. One
// model.safetensors; the other files (generation config, tokenizer) are copied.
inline void write_dequantized_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst) {
  namespace fs = std::filesystem;
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string n = e.path().filename().string();
    if (n.find("safetensors") == std::string::npos && n != "config.json")
      fs::copy_file(e.path(), dst / n, fs::copy_options::overwrite_existing);
  }
  nlohmann::json config = nlohmann::json::parse(model_test::read_file(src / "config.json"));
  ASSERT_TRUE(config.contains("quantization_config"));
  config.erase("quantization_config");
  model_test::write_file(dst / "config.json", config.dump(2));
  const std::vector<model_test::RawTensor> all = model_test::read_checkpoint(src);
  std::map<std::string, const model_test::RawTensor*> by_name;
  for (const auto& t : all) by_name[t.name] = &t;
  std::vector<model_test::RawTensor> out;
  size_t fp8 = 0;
  for (const auto& t : all) {
    if (t.name.size() > 10 && t.name.compare(t.name.size() - 10, 10, "_scale_inv") == 0) continue;
    if (t.dtype != "F8_E4M3") {
      out.push_back(t);
      continue;
    }
    ASSERT_TRUE(by_name.count(t.name + "_scale_inv")) << t.name;
    const std::vector<float> v = dequantize_by_definition(t, *by_name[t.name + "_scale_inv"]);
    out.push_back({t.name, "F32", t.shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
    ++fp8;
  }
  ASSERT_GT(fp8, 0u) << src << " holds no F8_E4M3 tensor";
  model_test::write_safetensors(dst / "model.safetensors", out);
}

}  // namespace nanovllm::testing
