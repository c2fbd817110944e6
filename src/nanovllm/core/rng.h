// Counter-based sampling randomness. A sequence's rng_state is a 64-bit key; the uniform draw for its
// k-th generated token is a pure function of (key, k). So seeded requests are reproducible regardless
// of batching, and a sequence preempted and recomputed draws the same numbers again. A GPU sampler
// must use these same functions to agree with the CPU one.
#pragma once

#include <cstdint>

namespace nanovllm {

// SplitMix64 finalizer (Steele et al.): a bijective 64-bit mixer.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The key of a request with SamplingParams::seed = seed.
constexpr uint64_t rng_key_from_seed(uint64_t seed) { return splitmix64(seed ^ 0x6E616E6F766C6C6Dull); }

// Uniform double in [0, 1) for the step-th generated token (step = num_output_tokens before it).
constexpr double rng_uniform(uint64_t key, int64_t step) {
  const uint64_t x = splitmix64(key ^ splitmix64(static_cast<uint64_t>(step)));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

}  // namespace nanovllm
