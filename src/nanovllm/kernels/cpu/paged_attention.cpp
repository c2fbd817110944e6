// Causal paged attention for a mixed batch (prefill chunks with a cached prefix, and decodes).
// Work item = (query row t, KV head): the K/V rows of the cache are read once for the whole GQA group.
// Scores in fp32 (8-lane partial sums), softmax with max subtraction and an fp64 denominator,
// output accumulated in fp32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {
namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (int64_t i = n8; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void paged_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                     const AttentionMetadata& meta, float scale) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2);
  const int64_t G = Hq / Hk;  // query heads per KV head
  const int64_t S = meta.num_seqs;
  const int64_t max_blocks = meta.block_tables.dim(1);
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();    // [S + 1]
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();   // [S]
  const int32_t* bt = meta.block_tables.data_as<const int32_t>();    // [S, max_blocks]
  std::vector<int32_t> seq_of(static_cast<size_t>(T));               // [T] row -> sequence
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);
  const bool kv_f32 = k_cache.dtype() == DType::kF32 && v_cache.dtype() == DType::kF32;

  parallel_for(T * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf, sbuf;
    float* qrow = scratch_f32(buf, G * D + 2 * D);  // [G, D] queries then output, [D] k, [D] v
    float* krow = qrow + G * D;
    float* vrow = krow + D;
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / Hk, kvh = item % Hk;
      const int64_t s = seq_of[static_cast<size_t>(t)];
      const int64_t p = int64_t{ctx[s]} - (int64_t{cu[s + 1]} - t);  // absolute position of row t
      const int64_t n = p + 1;                                        // keys 0..p
      float* scores = scratch_f32(sbuf, G * n);                        // [G, n]
      load_row_f32(q.data(), q.dtype(), (t * Hq + kvh * G) * D, G * D, qrow);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t slot = int64_t{bt[s * max_blocks + j / BS]} * BS + j % BS;
        const int64_t off = (slot * Hk + kvh) * D;
        const float* k = kv_f32 ? k_cache.data_as<const float>() + off : krow;
        if (!kv_f32) load_row_f32(k_cache.data(), k_cache.dtype(), off, D, krow);
        for (int64_t g = 0; g < G; ++g) scores[g * n + j] = dot(qrow + g * D, k, D) * scale;
      }
      for (int64_t g = 0; g < G; ++g) {
        float* sc = scores + g * n;
        const float m = *std::max_element(sc, sc + n);
        double denom = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          const double w = std::exp(static_cast<double>(sc[j]) - m);
          sc[j] = static_cast<float>(w);
          denom += w;
        }
        const float inv = static_cast<float>(1.0 / denom);
        for (int64_t j = 0; j < n; ++j) sc[j] *= inv;
      }
      // out[t, kvh*G + g, :] = sum_j p[g, j] v_j; accumulate in the q scratch (queries no longer needed).
      std::fill(qrow, qrow + G * D, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t slot = int64_t{bt[s * max_blocks + j / BS]} * BS + j % BS;
        const int64_t off = (slot * Hk + kvh) * D;
        const float* v = kv_f32 ? v_cache.data_as<const float>() + off : vrow;
        if (!kv_f32) load_row_f32(v_cache.data(), v_cache.dtype(), off, D, vrow);
        for (int64_t g = 0; g < G; ++g) {
          const float w = scores[g * n + j];
          float* o = qrow + g * D;
          for (int64_t d = 0; d < D; ++d) o[d] += w * v[d];
        }
      }
      store_row_f32(qrow, G * D, out.data(), out.dtype(), (t * Hq + kvh * G) * D);
    }
  }, 1);
}

}  // namespace nanovllm::cpu
