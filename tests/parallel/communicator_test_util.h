// Helpers of the communicator tests: fresh random data and an f32 view of it.
#pragma once

#include <random>
#include <vector>

#include "nanovllm/core/tensor.h"

namespace nanovllm::testing {

inline std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-10.f, 10.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

inline TensorView view(std::vector<float>& v) { return {v.data(), DType::kF32, Shape{static_cast<int64_t>(v.size())}}; }

}  // namespace nanovllm::testing
