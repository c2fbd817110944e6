// Helpers for the kernel tests: host tensors with their storage, random fills, error metrics.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/tensor.h"

namespace nanovllm::test {

// A host tensor owning its bytes; `v` views them.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView v;
  HostTensor() = default;
  HostTensor(DType t, Shape s) : bytes(static_cast<size_t>(s.numel()) * dtype_size(t)) {
    v = TensorView(bytes.data(), t, s);
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  int64_t numel() const { return v.numel(); }
  float get(int64_t i) const { return load_as_f32(v.data(), v.dtype(), static_cast<size_t>(i)); }
  void set(int64_t i, float x) {
    switch (v.dtype()) {
      case DType::kF32: v.data_as<float>()[i] = x; break;
      case DType::kBF16: v.data_as<uint16_t>()[i] = f32_to_bf16(x); break;
      case DType::kF16: v.data_as<uint16_t>()[i] = f32_to_f16(x); break;
      case DType::kI32: v.data_as<int32_t>()[i] = static_cast<int32_t>(x); break;
      default: FAIL() << "set: unsupported dtype";
    }
  }
  int32_t* i32() { return v.data_as<int32_t>(); }
  // All values as doubles (what the references read: the stored, already-rounded values).
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(i)] = get(i);
    return out;
  }
};

inline HostTensor random_tensor(DType t, Shape s, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  HostTensor h(t, s);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, d(rng));
  return h;
}

inline HostTensor i32_tensor(const std::vector<int32_t>& values, Shape s) {
  HostTensor h(DType::kI32, s);
  for (size_t i = 0; i < values.size(); ++i) h.i32()[i] = values[i];
  return h;
}
inline HostTensor i32_tensor(const std::vector<int32_t>& values) {
  return i32_tensor(values, Shape{static_cast<int64_t>(values.size())});
}

// Normalised mean squared error of `got` against the reference.
inline double nmse(const HostTensor& got, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = got.get(static_cast<int64_t>(i)) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? num / den : num;
}

inline double max_abs_err(const HostTensor& got, const std::vector<double>& ref) {
  double m = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::abs(got.get(static_cast<int64_t>(i)) - ref[i]));
  return m;
}

// fp32 results: NMSE <= 1e-7 (docs/design.md, "Style and tolerances").
inline void expect_close_f32(const HostTensor& got, const std::vector<double>& ref, const char* what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), ref.size()) << what;
  EXPECT_LE(nmse(got, ref), 1e-7) << what << " max abs err " << max_abs_err(got, ref);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_TRUE(std::isfinite(got.get(static_cast<int64_t>(i)))) << what << " element " << i;
}

}  // namespace nanovllm::test
