// Portable randomness for the task generators: xoshiro256** seeded through splitmix64, with integer-only
// helpers. std::*_distribution is never used: its output differs between standard libraries, and a
// sample must be the same on every machine (the trainer and the HF comparison read dumped prompts, but
// the eval itself regenerates them).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "nanovllm/core/rng.h"

namespace nanovllm::eval {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = seed = splitmix64(seed);
  }

  uint64_t next() {  // xoshiro256** 1.0 (Blackman, Vigna)
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n), n >= 1, without modulo bias (rejection of the short top range).
  uint64_t below(uint64_t n) {
    const uint64_t limit = -n % n;  // 2^64 mod n: values below it are rejected
    for (;;) {
      const uint64_t x = next();
      if (x >= limit) return x % n;
    }
  }
  // Uniform in [lo, hi], inclusive.
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  // Uniform in [0, 1) with 53 bits (exact: an integer times 2^-53).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  template <class T>
  void shuffle(std::vector<T>& v) {  // Fisher-Yates
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(below(i))]);
  }
  template <class T>
  const T& choice(const std::vector<T>& v) { return v[static_cast<size_t>(below(v.size()))]; }

  // k distinct indices of [0, n) in draw order (k <= n).
  std::vector<size_t> sample(size_t n, size_t k);

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// FNV-1a of a string (task names into seeds).
constexpr uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// The seed of one sample: a pure function of (seed, task, context, index), so a sample does not depend on
// which other samples are generated, in which order, or on how many threads.
constexpr uint64_t sample_seed(uint64_t seed, std::string_view task, int64_t context, int64_t index) {
  uint64_t h = splitmix64(seed ^ 0x72756C6572ull);  // "ruler"
  h = splitmix64(h ^ fnv1a(task));
  h = splitmix64(h ^ static_cast<uint64_t>(context));
  return splitmix64(h ^ static_cast<uint64_t>(index));
}

}  // namespace nanovllm::eval
