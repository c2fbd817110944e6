// "Keep the largest entries until `need` is covered" over one set of entries, by one CTA: the rule of the CPU
// references' cover_mass / cover_count and top-k (kernels/cpu): walking the entries by decreasing 64-bit key, an entry
// is kept while the weight kept before it is below need. Top-k is weight 1 and need k; a mass share is weight = mass
// and need = share x the total. Keys order the entries completely when their low bits hold ~index (ties of the value
// then go to the lower index, as the CPU's sorts do).
//
// A radix select, most significant digit first: six passes of 11/11/11/11/10/10 bits, each a shared-memory histogram
// (count and weight per digit) of the entries matching the digits found so far, then a block scan from the top digit
// finds the one whose weight reaches need. The set is re-read every pass (the callers' sets are up to a few million
// entries in global memory, recomputed or L2-resident). Weights are integers (fixed point for masses), so every sum is
// exact whatever order the atomics land in: the result is deterministic, and comparisons with need are exact while the
// total stays below 2^53 (the callers choose their fixed-point scale for that).
#pragma once

#include <cstdint>

#include <cub/block/block_scan.cuh>

namespace nanovllm::cuda_ops::radix {

constexpr int kThreads = 512;  // blockDim.x of the kernels calling select_top with Smem (SmemT<kThreads>)
constexpr int kPasses = 6;
constexpr int kMaxDigits = 2048;

// Low bit of each pass's digit: 53, 42, 31, 20, 10, 0; digit widths are the gaps (the first pass: bits 53..63).
__device__ __forceinline__ int digit_shift(int pass) { return pass < 4 ? 53 - 11 * pass : 10 * (5 - pass); }

// Threads: the calling kernel's blockDim.x, a power of two from 64 to 1024.
template <int Threads>
struct SmemT {
  using Scan = cub::BlockScan<unsigned long long, Threads>;
  typename Scan::TempStorage scan;
  unsigned count[kMaxDigits];             // entries per digit
  unsigned long long weight[kMaxDigits];  // their weight
  int digit;                              // the digit where need is reached, -1: nowhere
  unsigned long long above_w, above_c;    // weight and count of the digits above it, this pass
};
using Smem = SmemT<kThreads>;

// A thread's running (count, weight) of its last few digits, flushed to the shared histogram when evicted: the first
// pass's digits are the values' exponents, a handful for the whole set, and shared-memory atomics on a handful of
// addresses would serialise.
struct DigitSlots {
  static constexpr int kSlots = 8;
  int digit[kSlots];
  unsigned count[kSlots];
  unsigned long long weight[kSlots];
  int victim = 0;  // the slot a miss takes (round robin)
  __device__ DigitSlots() {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) digit[s] = -1;
  }
  template <class S>
  __device__ __forceinline__ void flush(int s, S& sm) {
    if (digit[s] < 0) return;
    atomicAdd(&sm.count[digit[s]], count[s]);
    atomicAdd(&sm.weight[digit[s]], weight[s]);
  }
  template <class S>
  __device__ __forceinline__ void add(int b, uint64_t w, S& sm) {
    bool hit = false;
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
      if (digit[s] == b) {
        ++count[s];
        weight[s] += w;
        hit = true;
      }
    if (hit) return;
#pragma unroll
    for (int s = 0; s < kSlots; ++s)  // unrolled, so the slots stay in registers
      if (s == victim) {
        flush(s, sm);
        digit[s] = b;
        count[s] = 1;
        weight[s] = w;
      }
    victim = victim + 1 == kSlots ? 0 : victim + 1;
  }
  template <class S>
  __device__ __forceinline__ void flush_all(S& sm) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) flush(s, sm);
  }
};

struct Need {
  double value;
  bool share;  // value x the set's total weight (found by the first pass) rather than value itself
};

struct Result {
  uint64_t threshold;  // the entries kept are those with key >= threshold (exactly so when keys are distinct)
  int64_t count;       // how many are kept (exact also when keys repeat)
};

// Kept entries of the set {entry(i) : i in [0, n)}: entry(i, key, weight) returns false for an index outside the set.
// Keep-nothing is threshold ~0 (no key reaches it: the callers' keys stay below 2^63), keep-everything threshold 0.
// Called by all the block's threads (SmemT's Threads); returns the same in every thread.
template <int Threads, class Entry>
__device__ Result select_top(int64_t n, const Entry& entry, Need need_of, SmemT<Threads>& sm) {
  using Scan = typename SmemT<Threads>::Scan;
  const int tid = threadIdx.x;
  double need = need_of.value;
  uint64_t prefix = 0;                 // the digits found so far, in place
  unsigned long long above_w = 0, above_c = 0;  // weight and count of the entries above the prefix's range (all kept)
  unsigned long long last_w = 0, last_c = 0;    // weight and count of the entries equal to the full prefix
  for (int pass = 0; pass < kPasses; ++pass) {
    const int shift = digit_shift(pass);
    const int top = pass == 0 ? 64 : digit_shift(pass - 1);  // bits [top, 64) are fixed by the passes before
    const int digits = 1 << (top - shift);
    for (int b = tid; b < digits; b += Threads) {
      sm.count[b] = 0;
      sm.weight[b] = 0;
    }
    __syncthreads();
    DigitSlots slots;
    for (int64_t i = tid; i < n; i += Threads) {
      uint64_t key = 0, w = 0;
      if (!entry(i, key, w)) continue;
      if (top < 64 && (key >> top) != (prefix >> top)) continue;
      slots.add(static_cast<int>((key >> shift) & static_cast<uint64_t>(digits - 1)), w, sm);
    }
    slots.flush_all(sm);
    __syncthreads();
    // Digits from the top: thread t sums its `per` digits (the t-th run from the top), a block scan gives the weight
    // above its run.
    const int per = digits / Threads, hi = digits - 1 - tid * per;  // this thread's digits: hi, hi - 1, ...
    unsigned long long w_run = 0, c_run = 0;
    for (int k = 0; k < per; ++k) {
      w_run += sm.weight[hi - k];
      c_run += sm.count[hi - k];
    }
    unsigned long long w_before = 0, c_before = 0, w_total = 0, c_total = 0;
    Scan(sm.scan).ExclusiveSum(w_run, w_before, w_total);
    __syncthreads();  // the scan storage is reused
    Scan(sm.scan).ExclusiveSum(c_run, c_before, c_total);
    if (pass == 0 && need_of.share) need = need_of.value * static_cast<double>(w_total);
    if (need <= 0) return {~uint64_t{0}, 0};  // the same in every thread
    if (tid == 0) sm.digit = -1;
    __syncthreads();
    // Exactly one digit has weight before it < need <= weight through it (weights >= 0, need > 0), unless the total
    // stays below need (only in the first pass: later ones split the previous pass's digit, which reached it).
    unsigned long long w_at = above_w + w_before, c_at = c_before;
    for (int k = 0; k < per; ++k) {
      const int b = hi - k;
      const unsigned long long w = sm.weight[b];
      if (static_cast<double>(w_at) < need && static_cast<double>(w_at + w) >= need) {
        sm.digit = b;
        sm.above_w = w_at - above_w;
        sm.above_c = c_at;
      }
      w_at += w;
      c_at += sm.count[b];
    }
    __syncthreads();
    const int b = sm.digit;
    if (b < 0) return {prefix, static_cast<int64_t>(above_c + c_total)};  // everything from the prefix down is kept
    prefix |= static_cast<uint64_t>(b) << shift;
    above_w += sm.above_w;
    above_c += sm.above_c;
    last_w = sm.weight[b];
    last_c = sm.count[b];
    __syncthreads();  // the histogram and the digit are rewritten by the next pass
  }
  // Every bit is fixed: last_c entries have the key `prefix` (with equal weights: the callers' weights follow their
  // keys); the first r of them reach need.
  int64_t r = static_cast<int64_t>(last_c);
  if (last_c > 1 && last_w > 0) {
    const double each = static_cast<double>(last_w) / static_cast<double>(last_c);
    const double want = ceil((need - static_cast<double>(above_w)) / each);
    r = want < 1 ? 1 : (want < static_cast<double>(last_c) ? static_cast<int64_t>(want) : r);
  }
  return {prefix, static_cast<int64_t>(above_c) + r};
}

}  // namespace nanovllm::cuda_ops::radix
